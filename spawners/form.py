"""The spawn page: its options and their rendering.

What the form offers (each profile the user may run, sized by what the
shared poll sees of its partition), how its fields, a spawn link's query and
the REST API's options become a profile and a slice, and the HTML
(templates/form.html.j2, autoescaped). Plain functions of explicit inputs;
``PortalSpawner.options_form``, ``options_from_form``, ``options_from_query``
and ``load_user_options``, which JupyterHub calls, delegate here.
"""

import re
from datetime import datetime
from html import escape as html_escape
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from portal.core.numbers import whole_number
from portal.core.profiles import ProfileError, choose
from portal.helper.imagecheck import ImageError, plain_path

TEMPLATES = Path(__file__).parent / "templates"
# The site's choices (issue 38), beside the profile's own fields: the
# partition, the GPU model, account, QOS, reservation and node feature, and
# a session without GPUs' cores and memory.
SITE_KEYS = ("partition", "gpu_type", "account", "qos", "reservation", "feature", "cores", "mem_gb")
OPTION_KEYS = {"profile", "gpus", "hours", "nodes", "image", "notify", *SITE_KEYS}
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")

_html = Environment(
    loader=FileSystemLoader(str(TEMPLATES)),
    autoescape=select_autoescape(default=True),
)


class LinkOptions(Exception):
    """A GET spawn link's options: shown in the form for the user to confirm,
    never started at once (a link from another site must not start a job)."""


# -- options -----------------------------------------------------------------


def check_options(options):
    """Refuse, with ProfileError, options that are no object, have a key the
    form does not have, or a value with control characters."""
    if not isinstance(options, dict):
        raise ProfileError("options must be an object")
    unknown = sorted(repr(str(k)[:40]) for k in set(options) - OPTION_KEYS)
    if unknown:
        raise ProfileError(f"Unknown option(s): {', '.join(unknown)}", "options")
    for key, value in options.items():
        if isinstance(value, str) and CONTROL_RE.search(value):
            raise ProfileError(f"{key} must not contain control characters", key)


def resolve(options, profiles, groups):
    """(profile, slice) for ``options`` (checked by ``check_options``) among
    the ``profiles`` a member of ``groups`` may use; the first offered is the
    default. ProfileError or SliceError with a message for the user."""
    offered = [p for p in profiles if p.allows(groups)]
    if not offered:
        raise ProfileError("No profile is available to you; ask your admin", "profile")
    name = options.get("profile") or offered[0].name
    profile = choose(offered, name, groups)
    site = {key: options.get(key) for key in SITE_KEYS if key != "partition"}
    for key, value in site.items():
        if isinstance(value, bool) or not isinstance(value, (str, int, type(None))):
            raise ProfileError(f"{key} must be text or a whole number", key)
    job_slice = profile.make_slice(
        options.get("gpus", 1), options.get("hours"), options.get("nodes"),
        options.get("partition"), **site,
    )  # fmt: skip
    user_image(options, profile)
    notify_choice(options)
    return profile, job_slice


def notify_choice(options):
    """Whether ``options`` ask for notices by e-mail: the REST API's
    ``"notify": true`` or the form's checked box ("on"); ProfileError for
    anything else.

    >>> notify_choice({"notify": True}), notify_choice({"notify": "on"}), notify_choice({})
    (True, True, False)
    >>> notify_choice({"notify": "yes please"})
    Traceback (most recent call last):
    ...
    portal.core.profiles.ProfileError: notify must be true or false
    """
    value = options.get("notify", False)
    if value is True or (isinstance(value, str) and value in ("on", "true")):
        return True
    if (
        value is False
        or value is None
        or (isinstance(value, str) and value in ("", "off", "false"))
    ):
        return False
    raise ProfileError("notify must be true or false", "notify")


def user_image(options, profile):
    """The user's own image that ``options`` name for ``profile`` (a plain
    absolute path; that it is a folder in their home is checked as them,
    ``spawners.container``), or "" for the profile's image; ProfileError when
    the profile takes none, or needs one.

    >>> from portal.core.profiles import profile_from_dict
    >>> own = profile_from_dict({"name": "own", "display_name": "Own", "environment": "pytorch",
    ...                          "partition": "gpu", "user_images": True})
    >>> user_image({"image": " /home/bob/img/pt "}, own)
    '/home/bob/img/pt'
    >>> user_image({}, own)
    Traceback (most recent call last):
    ...
    portal.core.profiles.ProfileError: Own runs your own image: give its folder in your home
    """
    image = options.get("image") or ""
    if not isinstance(image, str):
        raise ProfileError("image must be the path of a folder in your home", "image")
    image = image.strip()
    if not image:
        if profile.user_images and not profile.image:
            raise ProfileError(
                f"{profile.display_name} runs your own image: give its folder in your home",
                "image",
            )
        return ""
    if not profile.user_images:
        raise ProfileError(
            f"{profile.display_name} does not run images of your own: leave image empty",
            "image",
        )
    try:
        return plain_path(image, "your image")
    except ImageError as e:
        raise ProfileError(str(e), "image") from None


def valid_options(profile, job_slice, options=None):
    """The options that give ``job_slice`` of ``profile`` (with the user's
    own image of ``options``), as they are kept."""
    kept = {
        "profile": profile.name,
        "gpus": job_slice.gpus,
        "hours": job_slice.hours,
        "nodes": job_slice.nodes,
    }
    if job_slice.partition != profile.partition:
        kept["partition"] = job_slice.partition
    kept.update(job_slice.choices())
    if job_slice.cpu_only:
        kept.update(cores=job_slice.cores, mem_gb=job_slice.mem_gb)
    image = user_image(options or {}, profile)
    if image:
        kept["image"] = image
    if notify_choice(options or {}):
        kept["notify"] = True
    return kept


def form_fields(formdata):
    """The form's fields (``{key: [value]}``), stripped, as options."""
    return {key: formdata.get(key, [""])[0].strip() for key in OPTION_KEYS}


def link_fields(query_data):
    """A spawn link's values (GET /hub/spawn?profile=...&gpus=...), as given."""
    return {
        key: str(query_data.get(key, [""])[0])[:100] for key in OPTION_KEYS if key in query_data
    }


def link_notes(link, profile, values):
    """What the form could not take from a spawn link's values, and what it
    shows instead: a link never fails silently."""
    notes = []
    if link.get("profile") and link["profile"] != profile["name"]:
        notes.append(
            f"The link's profile {link['profile'][:40]!r} is not available to you: "
            f"{profile['display_name']} is shown."
        )
        return notes
    if link.get("image") and not profile["user_images"]:
        notes.append(
            f"{profile['display_name']} does not run images of your own: the link's image "
            f"{link['image'][:80]!r} is left out."
        )
    limits = {"gpus": profile["offered_gpus"], "nodes": profile["offered_nodes"]}
    limits["hours"] = profile["max_hours"]
    for key, high in limits.items():
        given = link.get(key)
        if given not in (None, "") and whole_number(given) != values[key]:
            notes.append(
                f"The link's {key}={given[:20]!r} does not fit {profile['display_name']} "
                f"(1 to {high}): {values[key]} is set."
            )
    return notes


# -- the page ----------------------------------------------------------------


def offered_choices(offered, partitions, expected_start, quotas=None, site=None):
    """Each offered profile as the page shows it: its fields, the GPUs and
    nodes it can have now (its own limits, within its partition's largest
    node and node count), what is free, the expected starts of the sizes
    no node can take now (``expected_start``: Slice -> datetime), and the
    GPUs the user's QOS lets them ask for still (``quotas``: partition ->
    GpuQuota or None), and the site's choices (``site``: profile -> its
    ``portal.slurm.choices.offer``)."""
    profiles = []
    for p in offered:
        part = partitions.get(p.partition)
        quota = (quotas or {}).get(p.partition)
        node_gpus = part.largest_node.gpus if part and part.largest_node else p.max_gpus
        node_count = len(part.nodes) if part else p.max_nodes
        profiles.append(
            {
                **p.to_dict(),
                "offered_gpus": max(1, min(p.max_gpus, node_gpus)),
                "offered_nodes": max(1, min(p.max_nodes, node_count)),
                "free": part.gpus_free if part else None,
                "total": part.gpus if part else None,
                "largest_free": part.largest_free if part else None,
                # GPUs free on each node, most first: where N nodes x G GPUs fit now
                "nodes_free": sorted((n.gpus_free for n in part.nodes), reverse=True)
                if part
                else None,
                "expected": {
                    str(g): start.strftime("%a %H:%M")
                    for g in range(1, p.max_gpus + 1)
                    if (start := expected_start.get(p.make_slice(g, p.default_hours)))
                },
                "quota": quota.describe() if quota else "",
                "quota_room": quota.room if quota else None,
                "site": site(p) if site else None,
            }
        )
    return profiles


def chosen_values(profiles, last):
    """``(chosen profile's name, its choice, {"gpus", "nodes", "hours"})``:
    the chosen profile's GPU and node choices and hours are in the HTML
    itself, so the form works before (or without) its script: the ``last``
    or linked values where they fit the profile, else 1 GPU on 1 node and
    its default hours."""
    names = {p["name"] for p in profiles}
    chosen = last.get("profile") if last.get("profile") in names else profiles[0]["name"]
    current = next(p for p in profiles if p["name"] == chosen)
    same = last.get("profile") == chosen
    gpus = whole_number(last.get("gpus")) if same else None
    nodes = whole_number(last.get("nodes")) if same else None
    hours = whole_number(last.get("hours")) if same else None
    values = {
        "gpus": gpus if gpus and gpus <= current["offered_gpus"] else 1,
        "nodes": nodes if nodes and nodes <= current["offered_nodes"] else 1,
        "hours": hours if hours and hours <= current["max_hours"] else current["default_hours"],
        "image": str(last.get("image") or "") if same and current["user_images"] else "",
        "notify": last.get("notify") is True,
    }
    return chosen, current, values


def refusal(message):
    """The page for a user who can run no session, saying why."""
    return f"<p class='alert alert-warning'>{html_escape(message)}</p>"


def render_options_form(
    offered, poller, last, link=None, username="you", quotas=None, name_sessions=0, site=None,
    main_running=False,
):  # fmt: skip
    """The spawn page's HTML for the ``offered`` profiles (at least one),
    sized by what the shared ``poller`` knows now and the user's GPU
    ``quotas`` (``offered_choices``), pre-filled with the ``last`` options
    or a spawn ``link``'s values (then with notes on what did not fit).
    ``name_sessions``: how many sessions the user may run at once, when this
    page (the default session's) may name a new one beside it; 0 otherwise.
    ``site``: profile -> the site's choices it offers (``portal.slurm.choices.offer``).
    ``main_running``: the page of a preset's edit while the user's main
    session runs: a start needs a new session's name (or a stop first)."""
    if link is not None:
        # a link's values alone: what it leaves out takes the profile's defaults
        last = link
    profiles = offered_choices(offered, poller.partitions, poller.expected_start, quotas, site)
    catalog = getattr(poller, "catalog", None)
    chosen, current, values = chosen_values(profiles, last)
    return _html.get_template("form.html.j2").render(
        profiles=profiles,
        chosen=chosen,
        current=current,
        gpus_value=values["gpus"],
        nodes_value=values["nodes"],
        hours_value=values["hours"],
        image_value=values["image"],
        notify_value=values["notify"],
        username=username,
        name_sessions=name_sessions,
        main_running=main_running,
        link_notes=link_notes(link, current, values) if link else [],
        last=last,
        partitions=sorted(poller.partitions.values(), key=lambda part: part.name),
        # partitions whose own QOS allows no GPU: their GPUs are not offered
        cpu_partitions={
            name for name in poller.partitions if catalog is not None and catalog.cpu_only(name)
        },
        reserved=reserved_free(poller.partitions, catalog),
        cluster_error=poller.cluster_error,
        known=bool(poller.partitions),
    )


def reserved_free(partitions, catalog, now=None):
    """``{partition: {"held", "names", "free", "largest_free"}}``: the free
    GPUs on nodes an active reservation holds (``held``, of the reservations
    ``names``), free only to a session in it, and what is free, and most on
    one node, outside them; only partitions with such nodes. The page's
    table says both.

    >>> from portal.slurm.model import Node, Partition, Reservation, SiteCatalog
    >>> def node(name, free):
    ...     return Node(name, ("sxm2",), 4, 4 - free, 32, 0, 1024, 0, "idle")
    >>> sxm2 = Partition("sxm2", (node("n1", 3), node("n3", 2)), "1-00:00:00")
    >>> course = Reservation("course", datetime(2026, 1, 1), None, ("n3",), "", (), (), ())
    >>> reserved_free({"sxm2": sxm2}, SiteCatalog(reservations=(course,)), datetime(2026, 6, 1))
    {'sxm2': {'held': 2, 'names': ['course'], 'free': 3, 'largest_free': 3}}
    """
    if catalog is None:
        return {}
    now = now or datetime.now()
    held = [r for r in catalog.reservations if r.active(now) and r.nodes]
    found = {}
    for name, partition in partitions.items():
        nodes = {node for r in held for node in r.nodes}
        inside = [n for n in partition.nodes if n.name in nodes]
        if not inside:
            continue
        outside = [n.gpus_free for n in partition.nodes if n.name not in nodes]
        found[name] = {
            "held": sum(n.gpus_free for n in inside),
            "names": sorted({r.name for r in held for n in inside if n.name in r.nodes}),
            "free": sum(outside),
            "largest_free": max(outside, default=0),
        }
    return found
