"""Property-based fuzzing (hypothesis) of what a user can send to start a
session (the spawn form and the hub's server-start REST API), and of what an
admin can send to the admin service's profile API.

For every input: no 5xx; a refusal carries a message (the form again with its
error, or HTTP 400 with ``message``) and submits nothing; an accepted input
becomes exactly one Slurm job whose slice is inside its profile (GPUs and
nodes, 8 cores and 48 GB per GPU, hours, partition). Inputs: wrong types, out-of-range and
huge numbers, unicode digits and text, shell and LDAP metacharacters, sbatch
directives, oversized values, unknown keys.

The profile API (create, edit, delete, as carol): no 5xx; a refusal (4xx)
carries ``error`` and changes nothing; an accepted input stores exactly what
was sent; afterwards every stored profile passes the validation again
(``portal.core.profiles.profile_from_dict`` and the service's own check against
the cluster), and the seeded profiles are unchanged.

Violations are collected rather than raised at the first, so the figure
printed at the end counts every input that broke a property.
"""

import enum
import html
import re
import time
from urllib.parse import quote

import pytest
import requests
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from portal.core.profiles import ProfileError, profile_from_dict
from portal.store import FIELDS
from tests.support.jobs import cancel_jobs_of, scontrol_job, squeue
from tests.support.measure import figure
from tests.support.testhub import JOB_NAME, TEST_SETTINGS

USER = "bob"  # in portal-users, not in the vision group
EXAMPLES = 500  # per target; two targets: 1,000 inputs at least
ACCEPT_WAIT = 3  # seconds; a refusal answers at once, an accepted spawn waits on Slurm
# The test hub's profiles (tests/support/testhub.py), as the portal must enforce them.
# name -> (max_gpus per node, max_hours, max_nodes)
PROFILES = {
    "pytorch": (4, 24, 1),
    "tensorflow": (2, 24, 1),
    "vision": (2, 4, 1),
    "distributed": (4, 24, 2),
}
OFFERED_TO_BOB = {"pytorch", "tensorflow", "distributed"}
assert all(f'name = "{name}"' in TEST_SETTINGS for name in PROFILES)

METACHARACTERS = [
    "1;id", "$(id)", "`id`", "1 && touch /tmp/pwned", "1|sh", "1\n#SBATCH --gres=gpu:8",
    "--gres=gpu:8", "*", "*)(uid=*", "admin*", "\\2a", "\x00", "1\x00", "%s%n", "{{7*7}}",
    "{% raw %}", "<script>alert(1)</script>", "../../etc/passwd", "'", '"', "\\", "${IFS}",
    "1e3", "0x4", "+1", "1.0", " 2 ", "٣", "１", "²", "Ⅳ", "NaN", "Infinity", "-0", "00001",
    "9" * 40, "pytorch;id", "pytorch\n", "PYTORCH", "vision", "nosuch", "",
]  # fmt: skip
scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-2, max_value=30),
    st.floats(allow_nan=False, allow_infinity=False),  # JSON has no NaN or inf
    st.booleans(),
    st.none(),
    st.sampled_from(METACHARACTERS),
    st.text(max_size=30),
    st.text(min_size=5000, max_size=20000, alphabet="9a;$(){}*"),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=5), scalars, max_size=2),
)
profile_names = st.one_of(st.sampled_from([*PROFILES, "nosuch", ""]), values)
api_bodies = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={"profile": profile_names, "gpus": values, "hours": values, "nodes": values},
    ).flatmap(
        lambda d: st.dictionaries(st.text(max_size=12), values, max_size=2).map(
            lambda extra: {**extra, **d}
        )
    ),
    values,  # not an object at all
)
form_text = st.one_of(
    st.sampled_from(METACHARACTERS),
    st.text(max_size=40),
    st.from_regex(r"-?\d{1,8}", fullmatch=True),
    st.text(min_size=5000, max_size=20000),
)
form_bodies = st.fixed_dictionaries(
    {},
    optional={
        "profile": st.one_of(st.sampled_from([*PROFILES, "nosuch"]), form_text),
        "gpus": form_text,
        "hours": form_text,
        "nodes": form_text,
        "partition": form_text,  # not a field: must never reach the job
        "cmd": form_text,
    },
)


class Fuzz:
    """One target's counts and the violations found."""

    def __init__(self, client):
        self.client = client
        self.tried = 0
        self.accepted = 0
        self.refused = 0
        self.violations = []

    def violation(self, body, what):
        self.violations.append(f"{what}: {str(body)[:200]!r}")

    def report(self, capsys, target, minimum, extra=""):
        """Print the figure line; then at least ``minimum`` inputs, and no violation."""
        figure(
            capsys,
            f"fuzz {target}: {self.tried} inputs, {self.accepted} accepted, "
            f"{self.refused} refused, {len(self.violations)} errors found{extra}",
        )
        assert self.tried >= minimum
        assert not self.violations, self.violations[:20]

    def refusal(self, body, r, key):
        """A refused input: counted; a violation unless the JSON's ``key`` says why."""
        self.refused += 1
        try:
            message = r.json().get(key)
        except (ValueError, AttributeError):
            message = None
        if not isinstance(message, str) or not message.strip() or "Traceback" in message:
            self.violation(body, f"HTTP {r.status_code} without a message: {r.text[:100]}")

    def check_accepted(self, body, options):
        """An accepted input: exactly one job, inside its profile; then stop it."""
        self.accepted += 1
        deadline = time.monotonic() + 30
        rows = []
        while not rows and time.monotonic() < deadline:
            rows = squeue("-n", JOB_NAME, "-u", USER, "-o", "%i")
            time.sleep(0.2)
        if len(rows) != 1:
            self.violation(body, f"accepted, {len(rows)} jobs")
        for (job_id,) in rows:
            job = scontrol_job(job_id)
            tres = dict(item.split("=", 1) for item in job["TRES"].split(","))
            nodes = int(tres.get("node", 0))
            gpus = int(tres.get("gres/gpu", 0)) // max(nodes, 1)  # per node
            hours = int(job["TimeLimit"].split(":")[0].split("-")[-1])
            name = options.get("profile") or "pytorch"
            max_gpus, max_hours, max_nodes = PROFILES.get(name, (0, 0, 0))
            if name not in OFFERED_TO_BOB:
                self.violation(body, f"job {job_id} for profile {name!r} not offered to {USER}")
            elif not (
                1 <= gpus <= max_gpus
                and 1 <= nodes <= max_nodes
                and tres["cpu"] == str(8 * gpus * nodes)
                and tres["mem"] == f"{48 * gpus * nodes}G"
                and 1 <= hours <= max_hours
                and job["Partition"] == "gpu"
            ):
                self.violation(body, f"job {job_id} outside profile {name}: {job['TRES']}")
        self.client.api("DELETE", f"/users/{USER}/server")
        cancel_jobs_of([USER])
        self.client.wait_stopped(USER, timeout=60)

    def nothing_started(self, body):
        if squeue("-n", JOB_NAME, "-u", USER, "-o", "%i"):
            self.violation(body, "refused, yet a job was submitted")
            cancel_jobs_of([USER])


@pytest.fixture(scope="module")
def bob(hub, accounts):
    from tests.support.hubclient import HubClient

    client = HubClient(hub)
    assert client.login(USER, accounts[USER]["password"]).status_code == 302
    yield client
    client.api("DELETE", f"/users/{USER}/server")
    cancel_jobs_of([USER])


FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.slow
def test_fuzz_rest_api_server_start(bob, capsys):
    fuzz = Fuzz(bob)

    @FUZZ_SETTINGS
    @given(api_bodies)
    def post(body):
        fuzz.tried += 1
        try:
            r = bob.api("POST", f"/users/{USER}/server", json=body, timeout=ACCEPT_WAIT)
        except requests.exceptions.ReadTimeout:
            r = None  # the spawn is under way: accepted
        if r is None or r.status_code in (201, 202):
            fuzz.check_accepted(body, body if isinstance(body, dict) else {})
            return
        if r.status_code >= 500:
            fuzz.violation(body, f"HTTP {r.status_code}")
        elif r.status_code != 400:
            fuzz.violation(body, f"HTTP {r.status_code}, not 400")
        else:
            fuzz.refusal(body, r, "message")
        fuzz.nothing_started(body)

    post()
    fuzz.report(capsys, "REST API (POST /hub/api/users/NAME/server)", EXAMPLES)


def spawn_form_action(client):
    page = client.session.get(client.url("/hub/spawn"), timeout=10)
    assert page.status_code == 200, page.status_code
    return html.unescape(re.search(r'id="spawn_form"\s+action="([^"]+)"', page.text).group(1))


@pytest.mark.slow
def test_fuzz_spawn_form(bob, capsys):
    fuzz = Fuzz(bob)
    action = spawn_form_action(bob)
    xsrf = bob.session.cookies.get("_xsrf", path="/hub/")

    @FUZZ_SETTINGS
    @given(form_bodies)
    def post(form):
        fuzz.tried += 1
        data = {**form, "_xsrf": xsrf}
        try:
            r = bob.session.post(
                bob.url(action), data=data, allow_redirects=False, timeout=ACCEPT_WAIT
            )
        except requests.exceptions.ReadTimeout:
            r = None
        if r is None or r.status_code == 302:
            fuzz.check_accepted(form, {"profile": form.get("profile", "").strip()})
            return
        if r.status_code >= 500:
            fuzz.violation(form, f"HTTP {r.status_code}")
        elif r.status_code != 200 or 'name="gpus"' not in r.text:
            fuzz.violation(form, f"HTTP {r.status_code}, not the form again")
        else:
            fuzz.refused += 1
            error = re.search(r'class="[^"]*spawn-error-msg[^"]*"[^>]*>\s*(.*?)</', r.text, re.S)
            if not error or not error.group(1).strip() or "Traceback" in r.text:
                fuzz.violation(form, "the form again, without a message")
        fuzz.nothing_started(form)

    post()
    fuzz.report(capsys, "spawn form (POST /hub/spawn)", EXAMPLES)


# -- the admin service's profile API, as carol (a portal admin) ----------------

PROFILE_EXAMPLES = {"create": 200, "edit": 200, "delete": 100}  # 500 inputs
EDIT, DELETE = "fuzz-edit", "fuzz-delete"  # the fuzz's own profiles, edited and deleted
TARGET = {"display_name": "Fuzz target", "environment": "pytorch", "max_gpus": 1}
# Text that JSON carries and a form cannot (lone surrogates), and text that is
# neither markup nor a control character yet is odd in a page or a database.
PROFILE_TEXT = [
    "\ud800", "a\udfffb", "\u202eevil", "\x7f", "\u00a0", "\u2028", "\ufeff", "&lt;b&gt;", " ",
    "\t", "a\nb", "ok</td>", "'; DROP TABLE portal_profiles; --", "fuzz-edit", "pytorch",
]  # fmt: skip
# Bodies that are not JSON, or JSON that is hard to take.
RAW_BODIES = [
    b"", b"{", b"[" * 5000, b'{"a":' * 3000, b"\xff\xfe{}", b'{"name": NaN}', b"9" * 5000,
    b'{"max_gpus": 1e999}', b'{"display_name": "\\udfff"}', b'{"name": "a", "name": "b"}',
]  # fmt: skip
GROUPS = ["vision", "portal-users", "a.b_c-d", "x" * 64]
PAGE_TEXT = st.characters(exclude_categories=("Cs", "Cc"), exclude_characters="<>")
ENVIRONMENTS = ["pytorch", "tensorflow", "jupyter", "mxnet"]  # installed ones


class Revision(enum.Enum):
    """What a fuzzed edit or delete names as the revision it changes."""

    CURRENT = "the current one"
    STALE = "the one before"
    OMITTED = "none"


# What the rules allow (the cluster may still refuse: 4 GPUs, 32 cores, 192 GB, 7 days).
PLAUSIBLE = {
    "display_name": st.text(PAGE_TEXT, min_size=1, max_size=80),
    "description": st.text(PAGE_TEXT, max_size=500),
    "environment": st.sampled_from(ENVIRONMENTS),
    "partition": st.just("gpu"),
    "max_gpus": st.integers(1, 4),
    "cores_per_gpu": st.integers(1, 8),
    "mem_per_gpu_gb": st.integers(1, 48),
    "default_hours": st.integers(1, 24),
    "max_hours": st.integers(24, 168),
    "groups": st.lists(st.sampled_from(GROUPS), max_size=3),
    "enabled": st.booleans(),
}
anything = st.one_of(
    values,
    st.integers(-1, 300),
    st.sampled_from(METACHARACTERS + PROFILE_TEXT),
    st.lists(st.sampled_from(["vision", "", " vision", "a)(uid=*", "*", "x" * 65, "é"])),
    st.text(min_size=500, max_size=600),
)
new_names = st.from_regex(r"fuzz-[a-z0-9-]{1,20}", fullmatch=True)
# up to two fields spoilt, sometimes an unknown one added
spoilt = st.dictionaries(
    st.one_of(st.sampled_from([*PLAUSIBLE, "name"]), st.text(max_size=12)), anything, max_size=2
)


def profile_bodies(required):
    """A plausible profile with the ``required`` fields, any of the others and up to
    two fields spoilt."""
    optional = {k: v for k, v in PLAUSIBLE.items() if k not in required}
    plausible = st.fixed_dictionaries(required, optional=optional)
    return st.tuples(plausible, spoilt).map(lambda t: {**t[0], **t[1]})


create_inputs = st.one_of(
    profile_bodies(
        {"name": new_names} | {k: PLAUSIBLE[k] for k in ("display_name", "environment")}
    ),
    profile_bodies({"name": new_names}),
    st.dictionaries(st.sampled_from([*PLAUSIBLE, "name"]), anything),  # anything goes
    values,  # not an object
    st.sampled_from(RAW_BODIES),  # not JSON
)
profile_urls = st.one_of(  # the name in the URL; None: the fuzz's own profile
    st.just(None), st.just(None), st.just(None),
    st.sampled_from(["fuzz-nosuch", "Fuzz-Edit", "fuzz-edit ", "%2e", "new", "pytorch;id"]),
    st.text(min_size=1, max_size=20).filter(lambda n: n not in (".", "..")),  # no path steps
)  # fmt: skip
revisions = st.one_of(st.just(Revision.CURRENT), st.sampled_from(Revision), values)
edit_inputs = st.tuples(profile_urls, profile_bodies({}), revisions)
delete_inputs = st.tuples(
    profile_urls,
    st.one_of(
        st.just(Revision.CURRENT),
        st.sampled_from(Revision),
        st.sampled_from(["²", "٣", "１", "0", "-1", "+1", " 1", "1.0", "9" * 30, *METACHARACTERS]),
        st.integers(-(2**70), 2**70).map(str),
        st.text(max_size=20),
    ),
)


def stored(key, value):
    """``value`` as the store keeps field ``key``: text stripped, groups sorted once each."""
    if key == "groups":
        return sorted(set(value))
    return value.strip() if isinstance(value, str) else value


def profile_path(name):
    """``api/profiles/NAME``, NAME quoted so it reaches the service as it is."""
    return "api/profiles/" + quote(name, safe="")


class ProfileFuzz(Fuzz):
    """The profile API's checks; ``self.client`` is carol's ``Portal``."""

    def answer(self, body, r, accepted):
        """True for an accepted input; else checks the refusal (4xx, with ``error``)."""
        if r.status_code == accepted:
            self.accepted += 1
            return True
        if r.status_code >= 500:
            self.violation(body, f"HTTP {r.status_code}")
        elif r.status_code not in (400, 404, 409):
            self.violation(body, f"HTTP {r.status_code}, not a refusal")
        else:
            self.refusal(body, r, "error")
        return False

    def check_valid(self, body, profile):
        """A profile as the service returned or stored it: valid under the rules."""
        try:
            profile_from_dict(profile)
        except ProfileError as e:
            self.violation(body, f"stored {profile.get('name')!r}, which is invalid: {e}")

    def unchanged(self, body, name, before):
        """After a refusal: profile ``name`` is still ``before``."""
        now = self.client.get(profile_path(name)).json()
        if now != before:
            self.violation(body, f"refused, yet {name} changed: {before} -> {now}")

    def recreate(self, name):
        r = self.client.send("POST", "api/profiles", json={"name": name, **TARGET})
        assert r.status_code == 201, r.text
        return r.json()


@pytest.mark.slow
def test_fuzz_profile_api(portal, restore_profiles, capsys):
    carol = portal("carol")
    fuzz = ProfileFuzz(carol)
    seeded = carol.get("api/profiles").json()
    targets = {name: fuzz.recreate(name) for name in (EDIT, DELETE)}
    created = set(targets)

    @settings(FUZZ_SETTINGS, max_examples=PROFILE_EXAMPLES["create"])
    @given(create_inputs)
    @example({"name": "fuzz-s", "display_name": "a\ud800", "environment": "pytorch"})
    @example(
        {"name": "fuzz-s", "display_name": "S", "environment": "pytorch", "description": "\udfff"}
    )
    @example(b"[" * 5000)
    def create(body):
        fuzz.tried += 1
        sent = {"data": body} if isinstance(body, bytes) else {"json": body}
        r = carol.send("POST", "api/profiles", **sent)
        if fuzz.answer(body, r, 201):
            profile = r.json()
            created.add(profile["name"])
            fuzz.check_valid(body, profile)
            if not isinstance(body, dict) or any(
                k not in profile or profile[k] != stored(k, v)
                for k, v in body.items()
                if k != "revision"
            ):
                fuzz.violation(body, f"stored otherwise: {profile}")

    @settings(FUZZ_SETTINGS, max_examples=PROFILE_EXAMPLES["edit"])
    @given(edit_inputs)
    @example((None, {"display_name": "\ud800"}, Revision.CURRENT))
    @example((None, {}, 2**70))
    def edit(case):
        url_name, body, revision = case
        current = targets[EDIT]
        if revision is Revision.CURRENT:
            body = {**body, "revision": current["revision"]}
        elif revision is Revision.STALE:
            body = {**body, "revision": current["revision"] - 1}
        elif revision is not Revision.OMITTED:
            body = {**body, "revision": revision}
        fuzz.tried += 1
        r = carol.send("PUT", profile_path(url_name or EDIT), json=body)
        if not fuzz.answer((url_name, body), r, 200):
            return fuzz.unchanged((url_name, body), EDIT, current)
        if url_name not in (None, EDIT):
            return fuzz.violation((url_name, body), f"edited {url_name!r}")
        profile = targets[EDIT] = r.json()
        fuzz.check_valid(body, profile)
        merged = {**current, **{k: stored(k, v) for k, v in body.items() if k != "revision"}}
        changed = any(merged[k] != current[k] for k in FIELDS)
        expected = {**merged, "revision": current["revision"] + (1 if changed else 0)}
        if body.get("revision") != current["revision"] or profile != expected:
            fuzz.violation(body, f"stored otherwise: {current} -> {profile}")

    @settings(FUZZ_SETTINGS, max_examples=PROFILE_EXAMPLES["delete"])
    @given(delete_inputs)
    @example((None, "²"))
    @example((None, "9" * 30))
    def delete(case):
        url_name, revision = case
        current = targets[DELETE]
        if revision is Revision.CURRENT:
            revision = str(current["revision"])
        elif revision is Revision.STALE:
            revision = str(current["revision"] - 1)
        query = {} if revision is Revision.OMITTED else {"revision": revision}
        fuzz.tried += 1
        r = carol.send("DELETE", profile_path(url_name or DELETE), params=query)
        if not fuzz.answer((url_name, query), r, 204):
            return fuzz.unchanged((url_name, query), DELETE, current)
        numbers = [int(n) for n in re.findall(r"[0-9]+", query["revision"])]
        if url_name not in (None, DELETE) or numbers != [current["revision"]]:
            fuzz.violation((url_name, query), f"deleted {url_name!r} at revision {revision!r}")
        if carol.get(profile_path(DELETE)).status_code != 404:
            fuzz.violation((url_name, query), f"204, yet {DELETE} is still there")
        targets[DELETE] = fuzz.recreate(DELETE)

    started = time.monotonic()
    create()
    edit()
    delete()
    # read back: every stored profile passes the validation again, the service's
    # own check against the cluster included; only accepted creates are stored
    after = carol.get("api/profiles").json()
    for profile in after:
        fuzz.check_valid("read back", profile)
        verdict = carol.send("POST", "api/check", json=profile).json()
        if verdict["error"]:
            fuzz.violation(profile, f"stored, yet the check refuses it: {verdict['error']}")
    seeded_names = {p["name"] for p in seeded}
    unexpected = {p["name"] for p in after} - seeded_names - created
    if unexpected:
        fuzz.violation(sorted(unexpected), "stored, yet refused")
    fuzz.report(
        capsys,
        "profile API (POST, PUT, DELETE /services/portal/api/profiles)",
        sum(PROFILE_EXAMPLES.values()),
        extra=f", {time.monotonic() - started:.0f} s",
    )
    assert [p for p in after if p["name"] in seeded_names] == seeded
    # restore_profiles deletes what the fuzz created
