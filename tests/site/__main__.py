"""A fresh login node by hand, for a site-like try (as root, from the repository)::

    PY=/opt/portal/envs/hub/bin/python
    $PY -m tests.site boot              # login2 at [cluster] network .30, joined to the demo
    $PY -m tests.site shell             # a root shell inside (nsenter)
    $PY -m tests.site run -- sinfo      # one command inside
    $PY -m tests.site status
    $PY -m tests.site remove            # powered off, its overlay removed

``--name`` and ``--address`` choose another machine; ``boot --no-join``
leaves it as mmdebstrap made it; ``boot --bind-ro PATH`` shows it a host
folder read-only (the machine reaches nothing beyond the bridge: a wheel's
dependencies come from a folder the host fills with ``pip download -d``).
``stop`` powers it off and keeps its files (STATE/NAME: console.log, the
overlay's upper folder); the next ``boot`` starts from a fresh root again.
"""

import argparse
import os
import sys

from tests.site.join import join_demo, stop_ldap_relay_if_unused
from tests.site.machine import Machine, MachineError, inside_argv


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tests.site",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("boot", "shell", "run", "status", "stop", "remove"))
    parser.add_argument("argv", nargs="*", help="run: the command")
    parser.add_argument("--name", default="login2")
    parser.add_argument("--address", help="default: [cluster] network .30")
    parser.add_argument("--no-join", action="store_true", help="boot: not joined to the demo")
    parser.add_argument("--bind-ro", action="append", default=[], metavar="PATH",
                        help="boot: a host folder seen read-only at the same path "
                        "(e.g. wheels for pip)")  # fmt: skip
    args = parser.parse_args(argv)
    machine = Machine(args.name, args.address, ro_binds=args.bind_ro)
    try:
        if args.command == "boot":
            machine.boot()
            if not args.no_join:
                join_demo(machine)
            shell = f"{sys.executable} -m tests.site shell --name {machine.name}"
            print(f"{machine.name} runs at {machine.address}, its / is {machine.root}; "
                  f"a shell: {shell}")  # fmt: skip
        elif args.command == "shell":
            argv = inside_argv(machine.leader, ["bash", "-l"])
            os.execvp(argv[0], argv)
        elif args.command == "run":
            argv = inside_argv(machine.leader, args.argv)
            os.execvp(argv[0], argv)
        elif args.command == "status":
            if not machine.is_running():
                print(f"{machine.name}: not running")
                return 3
            address = machine.run(["ip", "-4", "-brief", "address", "show", "host0"]).stdout
            print(f"{machine.name}: {machine.system_state()}, {' '.join(address.split())}, "
                  f"PID 1 is {machine.leader} on the host, its / is {machine.root}")  # fmt: skip
        elif args.command in ("stop", "remove"):
            machine.stop() if args.command == "stop" else machine.remove()
            stop_ldap_relay_if_unused()
    except MachineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
