"""The portal's %tensorboard: its parsing and what it shows (no kernel, no server)."""

import pytest

from portal.session.tensorboard.magic import MagicError, parse_logdir, render


@pytest.mark.parametrize(
    "line, logdir, ignored",
    [
        ("--logdir logs", "logs", []),
        ("--logdir=logs/pytorch", "logs/pytorch", []),
        ("--logdir 'my logs' --port 6006", "my logs", ["--port", "6006"]),
        ("--logdir_spec a:logs", "a:logs", []),
    ],
)
def test_parse_logdir(line, logdir, ignored):
    assert parse_logdir(line) == (logdir, ignored)


@pytest.mark.parametrize("line", ["", "--port 6006", "--logdir", "--logdir 'unclosed"])
def test_parse_logdir_refuses_with_usage(line):
    with pytest.raises(MagicError, match="usage: %tensorboard --logdir"):
        parse_logdir(line)


def test_render_escapes():
    shown = render({"url": '/user/a/portal/tensorboard/1/"><script>', "logdir": "<b>"})
    assert "<script>" not in shown and "<b>" not in shown
    assert 'target="_blank"' in shown and "<iframe" in shown
