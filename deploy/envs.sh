#!/usr/bin/env bash
# Builds the Python environments from Debian's /usr/bin/python3 under the
# world-readable prefix (jobs run them as the LDAP user, who cannot read
# /root). Each is rebuilt only when its requirements (or, for the hub, the
# repository's path or setup.cfg) changed. Then the kernels of the framework
# environments and R go into the jupyter environment (deploy/kernels.py).
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "$0")/common.sh"

# pip_quiet DIR ARGS...: pip of the environment at DIR, without the noise of
# this machine's missing local index folders.
pip_quiet() {
    local dir=$1; shift
    "$dir/bin/python" -m pip -q "$@" 2> >(grep -v 'is ignored: it is neither' >&2)
}

# build_env DIR REQUIREMENTS [EXTRA_PIP_ARGS...]
build_env() {
    local dir=$1 reqs=$2; shift 2
    local stamp="$dir/.portal-stamp" want
    want=$(cat "$reqs" "$@" 2>/dev/null | sha256sum | cut -d' ' -f1)
    want="$want $*"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    log "building $dir"
    [ -x "$dir/bin/python" ] || /usr/bin/python3 -m venv "$dir"
    pip_quiet "$dir" install --upgrade pip
    pip_quiet "$dir" install -r "$reqs"
    echo "$want" > "$stamp"
}

# without_slow_iri_check DIR: jsonschema imports rfc3987-syntax, when installed
# (jupyter-events asks for jsonschema[format-nongpl]), at its own import, and
# rfc3987-syntax compiles ~35 Lark parsers then: 1.5 s of every Jupyter
# server's and hub's start on this machine. No Jupyter or JupyterHub schema
# uses the iri formats it checks (jupyter_server#1559): it is removed.
without_slow_iri_check() {
    local dir=$1
    if compgen -G "$dir/lib/python3*/site-packages/rfc3987_syntax" > /dev/null; then
        log "removing rfc3987-syntax from $dir (1.5 s of each start)"
        pip_quiet "$dir" uninstall -y rfc3987-syntax
    fi
}

umask 022
mkdir -p "$PORTAL_ENVS_PREFIX/envs"
chmod 755 "$PORTAL_ENVS_PREFIX" "$PORTAL_ENVS_PREFIX/envs"

build_env "$PORTAL_ENVS_JUPYTER" "$DEPLOY_DIR/requirements-jupyter.txt"
without_slow_iri_check "$PORTAL_ENVS_JUPYTER"

# The portal package in the jupyter environment, for its server extensions
# (portal.session, enabled by the etc/jupyter file it installs). A copy,
# not editable: users cannot read this checkout. Re-installed when a file of
# the package changes.
stamp="$PORTAL_ENVS_JUPYTER/.portal-package"
package_files=(portal spawners setup.cfg pyproject.toml README.md)
want=$(cd "$REPO_DIR" && find "${package_files[@]}" -type f ! -path '*/__pycache__/*' -print0 |
    sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing the portal package into $PORTAL_ENVS_JUPYTER"
    src=$(mktemp -d)
    trap 'rm -rf "$src"' EXIT
    tar -C "$REPO_DIR" -c --exclude=__pycache__ "${package_files[@]}" | tar -C "$src" -x
    pip_quiet "$PORTAL_ENVS_JUPYTER" install --no-deps --force-reinstall "$src"
    rm -rf "$src"
    echo "$want" > "$stamp"
fi

# One environment per framework; [envs] framework_build picks CPU or CUDA builds.
# The two builds are different distributions of the same modules
# (tensorflow-cpu and tensorflow, mxnet and mxnet-cu117): an environment whose
# build changes is made afresh, not installed over. Environments without a
# .portal-build file were built before there was a choice: CPU.
build=$PORTAL_ENVS_FRAMEWORK_BUILD
fw_envs=()
for fw in $PORTAL_ENVS_FRAMEWORKS; do
    reqs="$DEPLOY_DIR/frameworks/$fw-$build.txt"
    [ -f "$reqs" ] || die "no $reqs: check [envs] frameworks and framework_build (cpu or cuda)"
    dir="$PORTAL_ENVS_PREFIX/envs/$fw"
    built=$(cat "$dir/.portal-build" 2>/dev/null || echo cpu)
    if [ -d "$dir" ] && [ "$built" != "$build" ]; then
        log "removing $dir ($built build) for the $build build"
        rm -rf "$dir"
    fi
    build_env "$dir" "$reqs"
    [ "$(cat "$dir/.portal-build" 2>/dev/null)" = "$build" ] || echo "$build" > "$dir/.portal-build"
    fw_envs+=("$dir")
done

# Their kernels (and R's) in the jupyter environment, the session's default
# kernel, and modulefiles for terminals.
modulefiles="$PORTAL_ENVS_PREFIX/modulefiles"
/usr/bin/python3 "$DEPLOY_DIR/kernels.py" "$PORTAL_ENVS_JUPYTER" "$modulefiles" "${fw_envs[@]}"
modulespath=/etc/environment-modules/modulespath
if [ -f "$modulespath" ] && ! grep -qxF "$modulefiles" "$modulespath"; then
    log "adding $modulefiles to $modulespath"
    echo "$modulefiles" >> "$modulespath"
fi
# A session's terminal is a login shell, whose /etc/profile resets PATH: load
# the session's environment again there.
cmp -s "$DEPLOY_DIR/profile-portal.sh" /etc/profile.d/portal.sh ||
    install -m 644 "$DEPLOY_DIR/profile-portal.sh" /etc/profile.d/portal.sh

hub="$PORTAL_ENVS_PREFIX/envs/hub"
build_env "$hub" "$DEPLOY_DIR/requirements-hub.txt"
without_slow_iri_check "$hub"
# The portal package, editable from this checkout (re-done when it moves).
stamp="$hub/.portal-package"
want="$REPO_DIR $(sha256sum "$REPO_DIR/setup.cfg" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing the portal package from $REPO_DIR"
    pip_quiet "$hub" install --no-deps -e "$REPO_DIR"
    echo "$want" > "$stamp"
fi
