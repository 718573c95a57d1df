"""TensorBoard's page under a path prefix: its font URLs are made relative."""

from portal.session.tensorboard.page import relative_font_urls

PREFIX = "/user/alice/portal/tensorboard/0123456789ab"
# The start of TensorBoard's index.html, as it serves it (not compressed).
PAGE = (
    b'<!doctype html><meta name="tb-relative-root" content="./">'
    b"<style>@font-face { src: local('Roboto'), "
    b"url(/font-roboto/oMMgfZMQthOryQo9n22dcuvvDin1pK8aKteLpeZ5c0A.woff2) format('woff2'); }"
    b"@font-face { src: url(/font-roboto/RxZJdnzeo3R5zSexge8UUZBw1xU1rKptJj_0jans920.woff2); }"
    b'</style><script src="index.js?_file_hash=528dec0c"></script>'
)


def tensorboard(environ, start_response):
    """A stand-in for TensorBoard's app: its page, with its headers, and a script."""
    body = PAGE if environ["PATH_INFO"].endswith(("/", "/index.html")) else b"url(/font-roboto/"
    kind = "text/html; charset=utf-8" if body is PAGE else "text/javascript"
    headers = [
        ("Content-Type", kind),
        ("Content-Encoding", environ.get("test.encoding", "identity")),
        ("Content-Length", str(len(body))),
    ]
    start_response("200 OK", headers)
    return [b"" if environ["REQUEST_METHOD"] == "HEAD" else body]


def call(path, method="GET", **environ):
    answer = {}

    def start_response(status, headers, exc_info=None):
        answer.update(status=status, headers=dict(headers))

    app = relative_font_urls(tensorboard, PREFIX)
    body = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": path, **environ}, start_response))
    return answer["status"], answer["headers"], body


def test_the_pages_fonts_are_below_its_own_url():
    for path in (f"{PREFIX}/", f"{PREFIX}/index.html"):
        status, headers, body = call(path)
        assert status == "200 OK"
        assert b"/font-roboto/" not in body
        assert body.count(b"url(font-roboto/") == 2
        assert headers["Content-Length"] == str(len(body))
        assert headers["Content-Type"].startswith("text/html")
        assert b'<script src="index.js?_file_hash=528dec0c">' in body


def test_other_answers_pass_untouched():
    # TensorBoard's scripts, a compressed page (never served so, but not to be
    # corrupted), another prefix's page, and a POST
    assert call(f"{PREFIX}/index.js")[2] == b"url(/font-roboto/"
    assert call(f"{PREFIX}/", **{"test.encoding": "gzip"})[2] == PAGE
    assert call("/user/bob/portal/tensorboard/0123456789ab/")[2] == PAGE
    assert call(f"{PREFIX}/", "POST")[2] == PAGE


def test_head_of_the_page_claims_no_stale_length():
    status, headers, body = call(f"{PREFIX}/", "HEAD")
    assert status == "200 OK" and body == b""
    assert "Content-Length" not in headers
