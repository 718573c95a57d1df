"""Run code cells in a new kernel, as a user runs them in a notebook.

``RUN_CELLS`` is a script for ``python -c RUN_CELLS MIME KERNEL CELL...`` (run
as the user with the jupyter environment's Python); its last line is JSON, one
``[status, shown]`` per cell: what the cell printed, showed (as MIME, e.g.
``text/html``, when it has that form, else plain text), or its error.
"""

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
