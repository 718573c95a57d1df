"""TensorBoard's page under a path prefix: its fonts' URLs made relative.

TensorBoard's ``index.html`` asks for its fonts at ``/font-roboto/...``, the
root of the site, which under ``--path_prefix`` is not TensorBoard: behind the
hub, each is redirected to the hub's 404 page and the page falls back to other
fonts. The same files are served below the page's own URL, so the middleware
here makes those URLs relative (``url(font-roboto/...)``) in the page alone.
Plain WSGI, without TensorBoard, so that it is tested on its own.
"""

ROOT_FONTS = b"url(/font-roboto/"
RELATIVE_FONTS = b"url(font-roboto/"


def _header(headers, name, default=""):
    return next((v for k, v in headers if k.lower() == name), default)


def relative_font_urls(app, path_prefix):
    """The WSGI ``app`` (TensorBoard's), with relative font URLs in its page,
    which it serves at ``{path_prefix}/`` and ``{path_prefix}/index.html``."""
    prefix = path_prefix.rstrip("/")
    pages = {prefix + "/", prefix + "/index.html"}

    def middleware(environ, start_response):
        method = environ.get("REQUEST_METHOD")
        if method not in ("GET", "HEAD") or environ.get("PATH_INFO") not in pages:
            return app(environ, start_response)
        answer, written = [], []

        def keep(status, headers, exc_info=None):
            answer[:] = [status, headers, exc_info]
            return written.append

        result = app(environ, keep)
        try:
            parts = list(result)
            body = b"".join(written + parts)
        finally:
            if hasattr(result, "close"):
                result.close()
        status, headers, exc_info = answer
        html = _header(headers, "content-type").startswith("text/html")
        encoded = _header(headers, "content-encoding", "identity").lower() != "identity"
        if status.startswith("200") and html and not encoded:
            body = body.replace(ROOT_FONTS, RELATIVE_FONTS)
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            if method == "GET":  # HEAD: the length is the page's, not known here
                headers.append(("Content-Length", str(len(body))))
        start_response(status, headers, exc_info)
        return [body]

    return middleware
