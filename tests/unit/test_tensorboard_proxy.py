"""The header rules of the TensorBoard proxy."""

from tornado.httputil import HTTPHeaders

from portal.session.tensorboard.proxy import (
    end_to_end,
    merge_csp,
    request_headers,
    response_headers,
)


def names(pairs):
    return [name.lower() for name, _ in pairs]


def http_headers(pairs):
    headers = HTTPHeaders()
    for name, value in pairs:
        headers.add(name, value)
    return headers


def test_hop_by_hop_headers_are_not_forwarded():
    headers = [
        ("Connection", "keep-alive, X-Private"),
        ("Keep-Alive", "timeout=5"),
        ("Transfer-Encoding", "chunked"),
        ("Upgrade", "h2c"),
        ("TE", "trailers"),
        ("Proxy-Authorization", "Basic x"),
        ("X-Private", "named by Connection"),
        ("Accept", "application/json"),
    ]
    assert end_to_end(headers) == [("Accept", "application/json")]


def test_request_keeps_encoding_and_body_type_but_not_the_login():
    headers = http_headers(
        [
            ("Host", "127.0.0.1:18000"),
            ("Cookie", "jupyterhub-user-alice=secret"),
            ("Authorization", "token secret"),
            ("X-XSRFToken", "x"),
            ("Content-Length", "12"),
            ("Accept-Encoding", "gzip, deflate"),
            ("Content-Type", "multipart/form-data; boundary=b"),
            ("If-None-Match", '"abc"'),
        ]
    )
    assert names(request_headers(headers)) == ["accept-encoding", "content-type", "if-none-match"]


def test_response_passes_gzip_and_cache_headers_through():
    headers = http_headers(
        [
            ("Content-Encoding", "gzip"),
            ("Content-Length", "308"),
            ("Content-Type", "application/json"),
            ("ETag", '"aa94"'),
            ("Cache-Control", "no-cache, must-revalidate"),
            ("Server", "Werkzeug/3.1.9"),
            ("Date", "Sun, 22 Nov 2026 21:44:49 GMT"),
            ("Connection", "close"),
        ]
    )
    assert names(response_headers(headers)) == [
        "content-encoding",
        "content-type",
        "etag",
        "cache-control",
    ]
    # a HEAD answer has no body to count: its Content-Length is TensorBoard's
    assert "content-length" in names(response_headers(headers, "HEAD"))


def test_repeated_headers_stay_repeated():
    headers = HTTPHeaders()
    headers.add("Set-Cookie", "a=1")
    headers.add("Set-Cookie", "b=2")
    assert response_headers(headers) == [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")]


def test_csp_keeps_tensorboards_and_adds_jupyters_frame_ancestors():
    tb = "default-src 'self';script-src 'self' 'unsafe-eval'"
    ours = "frame-ancestors 'self'; report-uri /user/alice/api/security/csp-report"
    assert merge_csp(tb, ours) == (
        "default-src 'self'; script-src 'self' 'unsafe-eval'; frame-ancestors 'self'; "
        "report-uri /user/alice/api/security/csp-report"
    )


def test_csp_directive_set_by_tensorboard_wins():
    assert merge_csp("frame-ancestors 'none'", "frame-ancestors 'self'") == "frame-ancestors 'none'"
    assert merge_csp("", "frame-ancestors 'self'") == "frame-ancestors 'self'"
