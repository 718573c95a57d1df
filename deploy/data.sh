#!/usr/bin/env bash
# The shared data folder ([data] shared_data), world-readable, with the demo
# data sets that Debian packages: fashion-mnist -> /usr/share/datasets/fashion-mnist
# (gzipped IDX files, dataset-fashion-mnist). On a real site the folder is a
# mount (NFS, Isilon) holding the site's own data: this script only adds links
# that are missing, and never replaces, moves or deletes anything there.
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

data=$PORTAL_DATA_SHARED_DATA
[ -n "$data" ] || { log "[data] shared_data is empty: no shared data folder"; exit 0; }

umask 022
if [ ! -d "$data" ]; then
    log "creating $data"
    mkdir -p "$data"
    chmod 755 "$data"
fi

# link NAME TARGET: DATA/NAME -> TARGET, unless DATA/NAME exists (even as a
# dangling link: a site's choice).
link() {
    local name=$1 target=$2
    if [ -e "$data/$name" ] || [ -L "$data/$name" ]; then
        return 0
    fi
    [ -d "$target" ] || { log "no $target: $data/$name not linked"; return 0; }
    log "linking $data/$name -> $target"
    ln -s "$target" "$data/$name"
}

link fashion-mnist /usr/share/datasets/fashion-mnist
