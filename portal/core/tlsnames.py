"""The names a certificate of the hub's internal CAs covers (JupyterHub's
``internal_ssl``), as certipy takes them: ``IP:10.200.0.2``, ``DNS:n1``.

A client checks that the name it connected to is among them: the hub and
the proxy reach a session at its node's name (``squeue``'s), the session's
kernels at the node's address, the sessions the hub at ``[hub] connect_ip``.
"""

import ipaddress

# Not a name anybody connects to: an address to listen on.
UNSPECIFIED = {"", "0.0.0.0", "::"}


def alt_name(host):
    """``IP:host`` for an address, ``DNS:host`` for a name.

    >>> alt_name("10.200.0.2"), alt_name("n1"), alt_name("::1")
    ('IP:10.200.0.2', 'DNS:n1', 'IP:::1')
    """
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"DNS:{host}"
    return f"IP:{host}"


def alt_names(hosts):
    """Each of ``hosts`` once, in order, as an alt name; listening-only
    addresses (``0.0.0.0``) and blanks left out.

    >>> alt_names(["10.200.0.1", "", "login01", "10.200.0.1", "0.0.0.0"])
    ['IP:10.200.0.1', 'DNS:login01']
    """
    names = []
    for host in hosts:
        host = str(host).strip()
        if host in UNSPECIFIED or alt_name(host) in names:
            continue
        names.append(alt_name(host))
    return names


def node_alt_names(addresses):
    """The names of a session's certificate: every node it may run on, by
    name and by each address the name resolves to, from ``{node: [address,
    ...]}``. The node a Slurm job lands on is known only once it runs, and
    the certificate travels in the batch script, so it covers every node of
    the partition.

    >>> node_alt_names({"n1": ["10.200.0.2"], "n2": ["10.200.0.3"]})
    ['DNS:n1', 'IP:10.200.0.2', 'DNS:n2', 'IP:10.200.0.3']
    """
    return alt_names(host for node in addresses for host in (node, *addresses[node]))
