import pytest

from portal import settings
from portal.settings import hub_api_ip, public_url


def test_defaults_load():
    s = settings.load()
    assert s["slurm"]["cores_per_gpu"] == 8
    assert s["hub"]["bind_url"].endswith(":8000")


def test_site_file_overrides(tmp_path, monkeypatch):
    site = tmp_path / "portal.toml"
    site.write_text(
        '[slurm]\npartition = "a100"\n[hub]\nbind_url = "http://10.0.0.5:443"\ndomain = ""\n'
    )
    monkeypatch.setenv("PORTAL_CONFIG", str(site))
    s = settings.load()
    assert s["slurm"]["partition"] == "a100"
    assert s["slurm"]["cores_per_gpu"] == 8
    assert public_url(s) == "http://10.0.0.5:443/"


def test_sessions_get_origins_of_their_own_under_the_domain(tmp_path, monkeypatch):
    """[hub] domain: the hub at https://DOMAIN:PORT/, each user's sessions on
    NAME.DOMAIN, the admin service beside the hub, __Host- cookies."""
    from traitlets.config import Config

    from spawners.hub_config import configure_hub, subdomain

    site = tmp_path / "portal.toml"
    site.write_text('[hub]\nbind_url = "https://0.0.0.0:8443"\ndomain = "portal.example.org"\n')
    monkeypatch.setenv("PORTAL_CONFIG", str(site))
    s = settings.load()
    assert public_url(s) == "https://portal.example.org:8443/"
    c = Config()
    configure_hub(c, s)
    assert c.JupyterHub.subdomain_host == "https://portal.example.org:8443"
    assert c.JupyterHub.cookie_host_prefix_enabled is True
    hook = c.JupyterHub.subdomain_hook
    assert hook("alice", "portal.example.org", "user") == "alice.portal.example.org"
    assert hook("portal", "portal.example.org", "service") == "portal.example.org"
    assert hook is subdomain


def test_no_domain_keeps_sessions_on_the_hubs_origin(tmp_path, monkeypatch):
    from traitlets.config import Config

    from spawners.hub_config import configure_hub

    site = tmp_path / "portal.toml"
    site.write_text('[hub]\ndomain = ""\n')
    monkeypatch.setenv("PORTAL_CONFIG", str(site))
    c = Config()
    configure_hub(c, settings.load())
    assert "subdomain_host" not in c.JupyterHub


@pytest.mark.parametrize(
    "text, message",
    [
        ("[slurm]\npartiton = 'x'\n", "unknown key 'partiton'"),
        ("[slrum]\n", "unknown section"),
        ("[slurm]\ncores_per_gpu = '8'\n", "must be int"),
        ("[slurm]\ncores_per_gpu = true\n", "must be int"),
        ("[slurm\n", "not valid TOML"),
    ],
)
def test_bad_site_file_is_refused(tmp_path, monkeypatch, text, message):
    site = tmp_path / "portal.toml"
    site.write_text(text)
    monkeypatch.setenv("PORTAL_CONFIG", str(site))
    with pytest.raises(settings.SettingsError, match=message):
        settings.load()


def test_shell_lines_quote_values():
    lines = settings.shell_lines({"ldap": {"bind_dn_template": "uid={username},dc=x y"}})
    assert lines == ["PORTAL_LDAP_BIND_DN_TEMPLATE='uid={username},dc=x y'"]


@pytest.mark.parametrize(
    "hub, cluster, expected",
    [
        ({"api_ip": ""}, {"embedded": True, "nodes": 2}, "10.200.0.1"),
        ({"api_ip": ""}, {"embedded": True, "nodes": 0}, "127.0.0.1"),
        ({"api_ip": ""}, {"embedded": False, "nodes": 2}, "127.0.0.1"),
        ({"api_ip": "10.1.0.5"}, {"embedded": True, "nodes": 2}, "10.1.0.5"),
    ],
)
def test_the_hubs_api_listens_where_the_compute_nodes_reach_it(hub, cluster, expected):
    merged = settings.merge(settings.defaults(), {"hub": hub, "cluster": cluster})
    assert hub_api_ip(merged) == expected
