"""Run code cells in a new kernel, as a user runs them in a notebook.

``RUN_CELLS`` is a script for ``python -c RUN_CELLS MIME KERNEL CELL...`` (run
as the user with the jupyter environment's Python); its last line is JSON, one
``[status, shown]`` per cell: what the cell printed, showed (as MIME, e.g.
``text/html``, when it has that form, else plain text), or its error.

``run_in_session`` runs a cell in a running session instead, as the browser
does: a kernel started through Jupyter's REST API behind the proxy, the cell
sent over its websocket; ``start_in_session`` leaves such a cell running.
"""

import asyncio
import json
import uuid

import requests
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from tests.support.hubsettings import CA_CERT

RUN_CELLS = """
import json, sys
from jupyter_client.manager import start_new_kernel

mime, kernel, cells = sys.argv[1], sys.argv[2], sys.argv[3:]
km, kc = start_new_kernel(kernel_name=kernel, startup_timeout=60)
shown = []
try:
    for code in cells:
        out = []
        def hook(msg):
            content = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(content["text"])
            elif msg["msg_type"] in ("execute_result", "display_data"):
                data = content["data"]
                out.append(data.get(mime, data.get("text/plain", "")))
            elif msg["msg_type"] == "error":
                out.append(content["ename"] + ": " + content["evalue"])
        reply = kc.execute_interactive(code, timeout=120, output_hook=hook)
        shown.append([reply["content"]["status"], "".join(out).strip()])
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print(json.dumps(shown))
"""


async def run_in_session(server_url, token, code, timeout=120, kernel_name=None):
    """``[status, printed]`` of ``code`` run in a new kernel (``kernel_name``,
    default the server's) of the session at ``server_url``
    (``https://HOST:PORT/user/NAME/``), as the holder of the hub API ``token``
    (scope ``access:servers``); the kernel is shut down after."""
    headers = {"Authorization": f"token {token}"}
    kernel = _new_kernel(server_url, headers, kernel_name)
    ws, msg_id = await _execute(server_url, headers, kernel, code)
    try:
        return await _reply(ws, msg_id, timeout)
    finally:
        ws.close()
        requests.delete(server_url + f"api/kernels/{kernel}", headers=headers, timeout=60)


async def run_in_kernel(server_url, token, kernel, code, timeout=120):
    """``[status, printed]`` of ``code`` run in the session's running ``kernel``."""
    headers = {"Authorization": f"token {token}"}
    ws, msg_id = await _execute(server_url, headers, kernel, code)
    try:
        return await _reply(ws, msg_id, timeout)
    finally:
        ws.close()


async def start_in_session(server_url, token, code, kernel_name="python3", timeout=120):
    """Start ``code`` in a new kernel of the session, as ``run_in_session``,
    and leave it running: returns the kernel's id once it is busy with it,
    with the browser's websocket closed (a tab closed on a running cell)."""
    headers = {"Authorization": f"token {token}"}
    kernel = _new_kernel(server_url, headers, kernel_name)
    ws, msg_id = await _execute(server_url, headers, kernel, code)
    try:
        while True:
            raw = await asyncio.wait_for(ws.read_message(), timeout)
            if raw is None:
                raise AssertionError("the kernel's websocket closed before it was busy")
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "busy":
                return kernel
    finally:
        ws.close()


def _new_kernel(server_url, headers, kernel_name=None):
    body = {"name": kernel_name} if kernel_name else {}
    r = requests.post(server_url + "api/kernels", json=body, headers=headers, timeout=60)
    r.raise_for_status()
    return r.json()["id"]


async def _execute(server_url, headers, kernel, code):
    """The kernel's websocket, and the id of the execute request of ``code`` sent on it."""
    ws_url = server_url.replace("https", "wss", 1) + f"api/kernels/{kernel}/channels"
    ws = await websocket_connect(HTTPRequest(ws_url, headers=headers, ca_certs=CA_CERT))
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": "execute_request", "version": "5.3"}
    content = {"code": code, "silent": False, "store_history": False, "allow_stdin": False}
    await ws.write_message(
        json.dumps(
            {
                "header": {**header, "session": uuid.uuid4().hex, "username": ""},
                "parent_header": {},
                "metadata": {},
                "content": content,
                "channel": "shell",
            }
        )  # fmt: skip
    )
    return ws, msg_id


async def _reply(ws, msg_id, timeout):
    """What the kernel printed for ``msg_id``, once it replied and went idle."""
    out, status, idle = [], None, False
    while not (status and idle):
        raw = await asyncio.wait_for(ws.read_message(), timeout)
        if raw is None:
            raise AssertionError(f"the kernel's websocket closed; printed so far: {out}")
        msg = json.loads(raw)
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "error":
            out.append(f"{content['ename']}: {content['evalue']}")
        elif kind == "execute_reply":
            status = content["status"]
        elif kind == "status":
            idle = content["execution_state"] == "idle"
    return [status, "".join(out).strip()]
