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


def hub_of(**hub):
    return settings.merge(settings.defaults(), {"hub": hub})


FRONT = {"bind_url": "http://127.0.0.1:8000", "public_url": "https://portal.example.org/"}


@pytest.mark.parametrize(
    "hub, url, origin",
    [
        ({}, "https://portal.localhost:8000/", "https://portal.localhost:8000"),
        ({"domain": ""}, "https://127.0.0.1:8000/", None),
        ({**FRONT, "domain": "portal.example.org"}, "https://portal.example.org/",
         "https://portal.example.org"),
        ({**FRONT, "public_url": "https://Portal.example.org:8443", "domain": "portal.example.org"},
         "https://Portal.example.org:8443/", "https://Portal.example.org:8443"),
        ({**FRONT, "domain": ""}, "https://portal.example.org/", None),
    ],
)  # fmt: skip
def test_the_public_url_is_the_front_servers_else_derived_from_the_bind_url(hub, url, origin):
    s = hub_of(**hub)
    settings.check_public_url(s)
    assert settings.public_url(s) == url
    if origin:
        assert settings.origin(s) == origin


@pytest.mark.parametrize(
    "hub, message",
    [
        ({**FRONT, "bind_url": "http://0.0.0.0:8000"}, 'must listen on loopback.*"http://127.0.0.1:8000"'),
        ({**FRONT, "bind_url": "http://10.0.0.5:8000"}, "must listen on loopback"),
        ({**FRONT, "public_url": "http://portal.example.org/", "bind_url": "https://127.0.0.1:8000",
          "domain": "portal.example.org"}, "plain HTTP in front of an HTTPS bind_url"),
        ({**FRONT}, "domain 'portal.localhost' is not public_url's host.*"
                    'domain = "portal.example.org"'),
        ({**FRONT, "public_url": "https://portal.example.org/jupyter/", "domain": ""},
         "path '/jupyter/' must be bind_url's"),
        ({**FRONT, "public_url": "portal.example.org", "domain": ""}, "scheme, host and path only"),
        ({**FRONT, "public_url": "https://u:p@portal.example.org/", "domain": ""}, "scheme, host"),
        ({**FRONT, "public_url": "https://portal.example.org/?a", "domain": ""}, "scheme, host"),
        ({**FRONT, "public_url": "https://10.0.0.5/", "domain": "10.0.0.5"}, "is an address"),
        ({"bind_url": "ftp://0.0.0.0:21"}, "bind_url 'ftp://0.0.0.0:21' must be http"),
    ],
)  # fmt: skip
def test_an_inconsistent_public_url_stops_the_hub_and_names_the_fix(hub, message):
    from traitlets.config import Config

    from spawners.hub_config import configure_hub

    with pytest.raises(settings.SettingsError, match=message):
        configure_hub(Config(), hub_of(**hub))


def test_behind_a_front_web_server_the_hub_trusts_its_forwarded_address_only():
    """nginx on this host terminates TLS: redirects and cookies follow the
    public URL, cookies are Secure and __Host-, HSTS is nginx's to send, and
    X-Forwarded-For is read past nginx's own loopback address only."""
    from traitlets.config import Config

    from spawners.hub_config import configure_hub, configure_service

    s = hub_of(**FRONT, domain="portal.example.org")
    c = Config()
    configure_hub(c, s)
    configure_service(c, s)
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8000"
    assert c.JupyterHub.public_url == "https://portal.example.org/"
    assert c.JupyterHub.subdomain_host == "https://portal.example.org"
    assert c.JupyterHub.trusted_downstream_ips == ["127.0.0.1"]
    assert c.JupyterHub.tornado_settings == {"cookie_options": {"secure": True}}
    assert c.JupyterHub.cookie_host_prefix_enabled is True
    service = c.JupyterHub.services[0]["environment"]
    assert service["JUPYTERHUB_COOKIE_OPTIONS"] == '{"secure": true}'
    assert not settings.sends_hsts(s)
    # the proxy facing browsers itself: HSTS, and no forwarded address trusted
    c = Config()
    configure_hub(c, hub_of())
    assert c.JupyterHub.tornado_settings["headers"]["Strict-Transport-Security"]
    assert "trusted_downstream_ips" not in c.JupyterHub
    assert "public_url" not in c.JupyterHub


def test_a_plain_http_public_url_sets_no_secure_cookie():
    from traitlets.config import Config

    from spawners.hub_config import configure_hub

    c = Config()
    plain = {**FRONT, "public_url": "http://portal.example.org:8080/"}
    configure_hub(c, hub_of(**plain, domain=""))
    assert "tornado_settings" not in c.JupyterHub
    assert c.JupyterHub.public_url == "http://portal.example.org:8080/"
