"""A TCP relay: the demo's slapd, which listens on loopback only, offered on
the cluster's bridge to the site machines (tests/site/join.py starts it)::

    python -m tests.site.relay 10.200.0.1 3890 127.0.0.1 3890

Bytes are passed as they are (StartTLS goes through: the machine checks
slapd's own certificate). slapd's access rules do not depend on the peer's
address, so nothing is read through the relay that the directory would not
give a client on the bridge. Standard library only.
"""

import asyncio
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def serve(listen_host, listen_port, target_host, target_port):
    async def relay(client_reader, client_writer):
        try:
            target_reader, target_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, target_writer), pipe(target_reader, client_writer))

    server = await asyncio.start_server(relay, listen_host, listen_port, reuse_address=True)
    async with server:
        await server.serve_forever()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 4:
        print("usage: python -m tests.site.relay LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT",
              file=sys.stderr)  # fmt: skip
        return 2
    listen_host, listen_port, target_host, target_port = argv
    asyncio.run(serve(listen_host, int(listen_port), target_host, int(target_port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
