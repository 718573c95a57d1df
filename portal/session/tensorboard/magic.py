"""``%tensorboard`` in a portal session: TensorBoard behind the session's login.

TensorBoard's own magic starts TensorBoard on a local TCP port, which every
user of the node can reach. This IPython extension replaces it (also after
``%load_ext tensorboard``) with one that asks the session's Jupyter server for
the TensorBoard of the folder (the API of ``portal.session.tensorboard``, on a private
Unix socket) and shows it inline, with a link that opens it in a new tab::

    %tensorboard --logdir logs

Outside a portal session (no ``$PORTAL_TENSORBOARD_API``) TensorBoard's own
magic runs, when installed.

Standard library and IPython only: deploy/kernels.py copies this file into
every Python environment with a kernel, as ``portal_tensorboard_magic``, and
the kernels load it (``--ext``).
"""

import html
import json
import os
import shlex
import ssl
import urllib.error
import urllib.request

API_ENV = "PORTAL_TENSORBOARD_API"  # portal.contract.TENSORBOARD_API (this file is copied alone)
TOKEN_ENV = "JUPYTERHUB_API_TOKEN"
MAGIC = "tensorboard"
TIMEOUT = 120  # seconds TensorBoard may take to start
USAGE = "usage: %tensorboard --logdir FOLDER (a folder of your home, e.g. logs)"


class MagicError(Exception):
    """A message for the user, shown without a traceback."""


def parse_logdir(line):
    """The ``--logdir`` of a ``%tensorboard`` line, and the options it ignores."""
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise MagicError(f"{e}; {USAGE}") from None
    logdir, ignored = None, []
    i = 0
    while i < len(words):
        word = words[i]
        if word in ("--logdir", "--logdir_spec"):
            if i + 1 >= len(words):
                raise MagicError(f"{word} needs a folder; {USAGE}")
            logdir = words[i + 1]
            i += 2
            continue
        if word.startswith(("--logdir=", "--logdir_spec=")):
            logdir = word.split("=", 1)[1]
        else:
            ignored.append(word)
        i += 1
    if logdir is None:
        raise MagicError(USAGE)
    return logdir, ignored


def session_tls(environ=os.environ):
    """With the hub's internal_ssl, the context of a request to the session's
    own server: the session's certificate, the server's checked against the
    CAs the hub gave it (``JUPYTERHUB_SSL_*``, which kernels inherit); None
    without. As ``portal.tlscontext.from_environ``: this file is copied
    alone into environments without the portal package."""
    keyfile, certfile = (
        environ.get("JUPYTERHUB_SSL_KEYFILE"),
        environ.get("JUPYTERHUB_SSL_CERTFILE"),
    )
    if not keyfile or not certfile:
        return None
    context = ssl.create_default_context(cafile=environ["JUPYTERHUB_SSL_CLIENT_CA"])
    context.load_cert_chain(certfile, keyfile)
    return context


def start(logdir, api=None, token=None):
    """POST the folder to the session's API; TensorBoard's ``{"id", "url", "logdir"}``."""
    api = api or os.environ[API_ENV]
    token = token or os.environ.get(TOKEN_ENV, "")
    request = urllib.request.Request(
        api,
        data=json.dumps({"logdir": logdir}).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=session_tls()) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        try:
            message = json.load(e)["message"]
        except (ValueError, KeyError, TypeError):
            message = f"the session's server answered {e.code} {e.reason}"
        raise MagicError(message) from None
    except OSError as e:
        raise MagicError(f"the session's server did not answer: {e}") from None


def render(tb, height=800):
    """HTML: TensorBoard inline, and a link to it in a new tab."""
    url = html.escape(tb["url"], quote=True)
    name = html.escape(tb.get("logdir") or "~")
    return (
        f'<p><a href="{url}" target="_blank" rel="noopener">'
        f"Open TensorBoard of {name} in a new tab</a></p>"
        f'<iframe src="{url}" width="100%" height="{int(height)}" frameborder="0"></iframe>'
    )


def tensorboard_magic(line):
    """%tensorboard --logdir FOLDER: TensorBoard of a folder of your home, behind your login."""
    from IPython.core.error import UsageError
    from IPython.display import HTML, display

    if not os.environ.get(API_ENV):
        try:
            from tensorboard.notebook import _start_magic
        except ImportError:
            raise UsageError(f"no portal session here (${API_ENV} is not set)") from None
        return _start_magic(line)
    try:
        logdir, ignored = parse_logdir(line)
        tb = start(logdir)
    except MagicError as e:
        raise UsageError(str(e)) from None
    if ignored:
        print(f"ignored in a portal session: {' '.join(ignored)}")
    display(HTML(render(tb)))


def _register(ipython):
    ipython.register_magic_function(tensorboard_magic, magic_kind="line", magic_name=MAGIC)


def load_ipython_extension(ipython):
    _register(ipython)
    # `%load_ext tensorboard` registers TensorBoard's magic: ours comes back after it.
    manager = ipython.extension_manager
    original = manager._call_load_ipython_extension

    def call_load_ipython_extension(mod):
        result = original(mod)
        if getattr(mod, "__name__", "") == MAGIC:
            _register(ipython)
        return result

    manager._call_load_ipython_extension = call_load_ipython_extension
