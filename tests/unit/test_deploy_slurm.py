"""deploy/slurm_conf.py, slurm_accounts.py and slurm_setup.py: the embedded
cluster's files and accounting changes, without Slurm, MariaDB or root."""

import copy
import doctest
import os
import stat
import subprocess

import pytest

from deploy import slurm_accounts, slurm_conf, slurm_setup
from deploy.slurm_accounts import (
    AccountSpec,
    QosSpec,
    ReservationSpec,
    SetupError,
    group_members,
    hub_uid_invalid,
    lab_accounts,
    parse_list,
    parse_reservations,
    plan_admin_level,
    plan_qos,
    plan_qos_names,
    plan_registration,
    plan_removal,
    plan_reservation,
    plan_users,
    portal_account,
    portal_groups,
    qos_limits,
    qos_specs,
    reservations,
    slurm_time,
)
from deploy.slurm_conf import (
    HOSTS_BEGIN,
    HOSTS_END,
    MARKER,
    Cluster,
    check_cluster,
    config_files,
    hosts_text,
    shell_facts,
)
from portal import settings as portal_settings
from portal.slurm.parse import expand_hostlist

# sacctmgr list qos format=name,maxwall,maxtrespu,maxtres,mintres,flags
QOS_OK = "portal|1-00:00:00|gres/gpu=4||gres/gpu=1|DenyOnLimit\n"
PORTAL_QOS = QosSpec("portal", "1-00:00:00", "gres/gpu=4", "", "gres/gpu=1")
# sacctmgr list assoc: the account's own association, then its users'
ASSOC = "".join(f"{user}|portal|portal\n" for user in ("", "alice", "bob", "portal", "root"))
# a shape with no node_shapes and no partitions: every node the same, one partition
PLAIN = {"node_shapes": {}, "partitions": []}


@pytest.fixture
def settings():
    return copy.deepcopy(portal_settings.defaults())


def cluster(settings, **changes):
    for key, value in changes.items():
        settings["cluster"][key] = value
    return Cluster.from_settings(settings, "login")


@pytest.mark.parametrize("module", [slurm_conf, slurm_accounts])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


# ---------------------------------------------------------------- files


def test_slurm_conf_names_the_nodes_on_the_bridge(settings):
    text = slurm_conf.slurm_conf(cluster(settings, nodes=2, network="10.9.8", **PLAIN))
    lines = text.splitlines()
    assert lines[0] == MARKER
    assert "SlurmctldHost=login(10.9.8.1)" in lines
    assert "AccountingStorageHost=10.9.8.1" in lines
    assert "DefMemPerCPU=6144" in lines  # 196608 MB / 32 cores
    assert (
        "NodeName=n2 NodeAddr=10.9.8.3 CPUs=32 Sockets=1 CoresPerSocket=32 ThreadsPerCore=1"
        " RealMemory=196608 Gres=gpu:4 State=UNKNOWN"
    ) in lines
    assert lines[-1] == (
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=7-00:00:00 State=UP OverSubscribe=NO"
        " DenyQos=cpu"
    )


def test_the_demo_has_two_gpu_models_features_and_four_partitions(settings):
    """The shape of portal.toml: typed GRES, each model's TRES accounted,
    features, n3 smaller; gpu (the default) over n1 and n2, sxm2, pcie
    (denying the lab QOS nlp) and cpu (whose QOS allows no GPU); the other
    partitions deny the QOS cpu."""
    c = Cluster.from_settings(settings, "login")
    lines = slurm_conf.slurm_conf(c).splitlines()
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:v100-sxm2,gres/gpu:v100-pcie" in lines
    assert "PriorityType=priority/multifactor" in lines
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert nodes == [
        "NodeName=n1 NodeAddr=10.200.0.2 CPUs=32 Sockets=1 CoresPerSocket=32 ThreadsPerCore=1"
        " RealMemory=196608 Gres=gpu:v100-sxm2:4 Features=v100,sxm2,nvlink State=UNKNOWN",
        "NodeName=n2 NodeAddr=10.200.0.3 CPUs=32 Sockets=1 CoresPerSocket=32 ThreadsPerCore=1"
        " RealMemory=196608 Gres=gpu:v100-pcie:4 Features=v100,pcie State=UNKNOWN",
        "NodeName=n3 NodeAddr=10.200.0.4 CPUs=16 Sockets=1 CoresPerSocket=16 ThreadsPerCore=1"
        " RealMemory=98304 Gres=gpu:v100-sxm2:2 Features=v100,sxm2,course State=UNKNOWN",
    ]
    tail = " MaxTime=7-00:00:00 State=UP OverSubscribe=NO"
    assert [line for line in lines if line.startswith("PartitionName=")] == [
        f"PartitionName=gpu Nodes=n1,n2 Default=YES{tail} DenyQos=cpu",
        f"PartitionName=sxm2 Nodes=n1,n3{tail} DenyQos=cpu",
        f"PartitionName=pcie Nodes=n2{tail} DenyQos=cpu,nlp",
        f"PartitionName=cpu Nodes=n1,n2{tail} QOS=cpu",
    ]
    assert slurm_conf.gres_conf(c).splitlines()[1:] == [
        "NodeName=n1 Name=gpu Type=v100-sxm2 File=/dev/portal-gpu/n1/gpu[0-3]",
        "NodeName=n2 Name=gpu Type=v100-pcie File=/dev/portal-gpu/n2/gpu[0-3]",
        "NodeName=n3 Name=gpu Type=v100-sxm2 File=/dev/portal-gpu/n3/gpu[0-1]",
    ]


def test_a_bigger_node_setting_grows_the_nodes_without_a_count_of_their_own(settings):
    """The bench's big node ([cluster] node_gpus and node_cpus raised in a
    site file) grows n1 and n2, of partition gpu; n3 keeps its 2 GPUs."""
    c = cluster(settings, node_gpus=24, node_cpus=56)
    assert [(s.name, s.gres, s.cpus) for s in c.node_shapes()] == [
        ("n1", "gpu:v100-sxm2:24", 56),
        ("n2", "gpu:v100-pcie:24", 56),
        ("n3", "gpu:v100-sxm2:2", 16),
    ]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"nodes": 2}, r"\[cluster.node_shapes.n3\]: no such node with nodes = 2"),
        ({"node_shapes": {"n1": {"gpu_type": "v100 sxm2"}}}, "use letters, digits"),
        ({"node_shapes": {"n1": {"gpus": "4"}}}, "gpus must be int, got '4'"),
        ({"node_shapes": {"n1": {"features": "v100"}}}, "features must be list"),
        ({"node_shapes": {"n1": {"model": "a100"}}}, "unknown key 'model'"),
        ({"node_shapes": {"n1": {"cpus": 0}}}, "cpus and mem_mb must be 1 or more"),
        (
            {"partitions": [{"name": "gpu", "nodes": ["n1", "n9"]}]},
            "node n9 is not one of n1 to n3",
        ),
        ({"partitions": [{"name": "cpu", "nodes": ["n1"]}]}, "partition = 'gpu' is none of"),
        ({"partitions": [{"name": "gpu", "nodes": []}]}, "nodes is empty"),
        ({"partitions": [{"name": "gpu"}]}, "nodes is missing"),
        ({"partitions": [{"name": "gpu", "nodes": ["n1"], "deny_qos": ["-x"]}]}, "use letters"),
        ({"partitions": [{"name": "gpu", "nodes": ["n1"]}] * 2}, "named twice"),
    ],
)
def test_a_shape_that_cannot_be_built_is_refused_naming_the_setting(settings, changes, message):
    settings["cluster"].update(changes)
    with pytest.raises(SetupError, match=message):
        Cluster.from_settings(settings, "login")


def test_a_single_host_takes_no_shape(settings):
    """nodes = 0: this host alone, node_gpus untyped, [slurm] partition over it."""
    c = cluster(settings, nodes=0)
    assert [(s.name, s.gres, s.features) for s in c.node_shapes()] == [("login", "gpu:4", ())]
    assert slurm_conf.slurm_conf(c).splitlines()[-1].startswith("PartitionName=gpu Nodes=ALL ")


def test_a_single_host_is_its_own_node_without_gpus(settings):
    c = cluster(settings, nodes=0, node_gpus=0)
    text = slurm_conf.slurm_conf(c)
    assert "SlurmctldHost=login\n" in text
    assert "AccountingStorageHost=localhost\n" in text
    assert "NodeName=login NodeAddr=127.0.0.1 " in text
    assert "Gres=" not in text
    assert slurm_conf.gres_conf(c) == MARKER + "\n"
    assert slurm_conf.job_container_conf(c).splitlines()[-1] == (
        "NodeName=login BasePath=/var/spool/slurmd/login/job_containers"
    )


def test_every_file_is_marked_and_fully_rendered(settings):
    files = config_files(cluster(settings), "s3cret")
    assert [f.path for f in files] == [
        "/etc/slurm/slurm.conf",
        "/etc/slurm/gres.conf",
        "/etc/slurm/cgroup.conf",
        "/etc/slurm/job_container.conf",
        "/etc/slurm/slurmdbd.conf",
        "/etc/mysql/portal-slurm.cnf",
    ]
    for f in files:
        assert f.text.startswith(MARKER + "\n") and f.text.endswith("\n")
        assert not f.text.endswith("\n\n")
        assert "$" not in f.text and "\n##" not in f.text, f.path
    dbd = {f.path: f for f in files}["/etc/slurm/slurmdbd.conf"]
    assert dbd.mode == 0o600 and "StoragePass=s3cret\n" in dbd.text
    assert "IDENTIFIED BY 's3cret'" in slurm_conf.db_init_sql("s3cret")


def test_gres_conf_lists_each_nodes_devices(settings):
    text = slurm_conf.gres_conf(cluster(settings, nodes=2, node_gpus=2, **PLAIN))
    assert text.splitlines()[1:] == [
        "NodeName=n1 Name=gpu File=/dev/portal-gpu/n1/gpu[0-1]",
        "NodeName=n2 Name=gpu File=/dev/portal-gpu/n2/gpu[0-1]",
    ]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"nodes": 254}, "nodes = 254: use 0 to 253"),
        ({"nodes": -1}, "nodes = -1: use 0 to 253"),
        ({"network": "10.200"}, "use the first three numbers of a /24"),
        ({"network": "10.200.0\n"}, "use the first three numbers of a /24"),
        ({"network": "10.256.0"}, "256 is not 0 to 255"),
        ({"bridge": "Portal0"}, "bridge = 'Portal0'"),
        ({"bridge": "a-very-long-bridge"}, "up to 15 letters"),
        ({"node_cpus": 0}, "node_cpus = 0"),
    ],
)
def test_check_cluster_refuses(settings, changes, message):
    settings["cluster"].update(changes)
    with pytest.raises(SetupError, match=message):
        check_cluster(settings["cluster"])


def test_a_single_host_needs_no_network(settings):
    settings["cluster"].update(nodes=0, network="x", bridge="X")
    check_cluster(settings["cluster"])


def test_shell_facts_evaluate_in_bash(settings):
    facts = shell_facts(cluster(settings, nodes=2, **PLAIN))
    out = subprocess.run(
        ["bash", "-c", 'eval "$1"; echo "$CTLD_PID ${NODE_NAMES[*]} ${NODE_ADDR[n2]} $NODES"', "-"]
        + [facts],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == "/run/slurm/slurmctld.pid n1 n2 10.200.0.3 2\n"


# ---------------------------------------------------------------- /etc/hosts

NODES = {"n1": "10.0.0.2", "n2": "10.0.0.3"}
BLOCK = f"{HOSTS_BEGIN}\n10.0.0.2 n1\n10.0.0.3 n2\n{HOSTS_END}\n"


def test_hosts_block_added_once_and_replaced():
    hosts = "127.0.0.1 localhost\n::1 localhost\n"
    added = hosts_text(hosts, NODES)
    assert added == hosts + BLOCK
    assert hosts_text(added, NODES) is None
    fewer = hosts_text(added, {"n1": "10.0.0.2"})
    assert fewer == f"{hosts}{HOSTS_BEGIN}\n10.0.0.2 n1\n{HOSTS_END}\n"


def test_hosts_block_removed_keeps_the_lines_after_it():
    hosts = f"127.0.0.1 localhost\n{BLOCK}10.1.1.1 other\n"
    assert hosts_text(hosts, {}) == "127.0.0.1 localhost\n10.1.1.1 other\n"


def test_hosts_without_final_newline():
    assert hosts_text("127.0.0.1 localhost", {}) is None
    assert hosts_text("127.0.0.1 localhost", NODES) == "127.0.0.1 localhost\n" + BLOCK


@pytest.mark.parametrize(
    "hosts",
    [
        f"{HOSTS_BEGIN}\n10.0.0.2 n1\n",
        f"10.0.0.2 n1\n{HOSTS_END}\n",
        f"{HOSTS_END}\n{HOSTS_BEGIN}\n",
        BLOCK + BLOCK,
    ],
)
def test_hosts_edited_by_hand_is_refused(hosts):
    with pytest.raises(SetupError, match="were edited"):
        hosts_text(hosts, NODES)


# ---------------------------------------------------------------- limits


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1-00:00:00", "1-00:00:00"),
        ("24:00:00", "1-00:00:00"),
        ("30", "00:30:00"),
        ("30:01", "00:31:00"),
        ("2:30:00", "02:30:00"),
        ("7-0", "7-00:00:00"),
        ("1-2:3", "1-02:03:00"),
        ("0-23:59:59", "1-00:00:00"),
        ("08", "00:08:00"),
        ("1 day", None),
        ("", None),
    ],
)
def test_slurm_time(value, expected):
    assert slurm_time(value) == expected


@pytest.mark.parametrize(
    "wall, gpus, message",
    [("a day", 4, "qos_max_wall = 'a day' is not a Slurm time"), ("", -1, "use a number")],
)
def test_qos_limits_refuse(wall, gpus, message):
    with pytest.raises(SetupError, match=message):
        qos_limits({"qos_max_wall": wall, "qos_max_gpus_per_user": gpus})


def test_qos_as_configured_plans_nothing():
    assert plan_qos(QOS_OK, PORTAL_QOS) is None
    # flags and TRES limits a site added are kept, and need no change
    site = "portal|1-00:00:00|gres/gpu=4,cpu=8|cpu=64|gres/gpu=1|DenyOnLimit,NoReserve\n"
    assert plan_qos(site, PORTAL_QOS) is None
    # one listing of every QOS serves each
    assert plan_qos("normal|||||\n" + QOS_OK, PORTAL_QOS) is None


def test_qos_missing_is_added():
    change = plan_qos("", QosSpec("portal", "1-00:00:00", "", "", "gres/gpu=1"))
    assert change.argv == (
        "sacctmgr",
        "-i",
        "add",
        "qos",
        "portal",
        "MaxWall=1-00:00:00",
        "MaxTRESPerUser=gres/gpu=-1",
        "MaxTRESPerJob=gres/gpu=-1",
        "MinTRESPerJob=gres/gpu=1",
        "Flags=DenyOnLimit",
    )
    assert change.message == (
        "adding QOS portal: MaxWall=1-00:00:00 MaxTRESPerUser=none MaxTRESPerJob=none"
        " MinTRESPerJob=gres/gpu=1 Flags=DenyOnLimit"
    )


@pytest.mark.parametrize(
    "listing",
    [
        "portal|12:00:00|gres/gpu=4||gres/gpu=1|DenyOnLimit\n",
        "portal|1-00:00:00|gres/gpu=2||gres/gpu=1|DenyOnLimit\n",
        "portal|1-00:00:00|gres/gpu=4|||DenyOnLimit\n",
        "portal|1-00:00:00|gres/gpu=4|gres/gpu=0|gres/gpu=1|DenyOnLimit\n",
        "portal|1-00:00:00|gres/gpu=4||gres/gpu=1|\n",
    ],
)
def test_qos_that_differs_is_modified(listing):
    change = plan_qos(listing, PORTAL_QOS)
    assert change.argv[2:6] == ("modify", "qos", "portal", "set")
    assert "MaxTRESPerJob=gres/gpu=-1" in change.argv
    assert change.argv[-1] == "Flags+=DenyOnLimit"
    assert "(was " in change.message


def test_qos_modified_says_what_it_was():
    change = plan_qos("portal|||||\n", QosSpec("portal", "", "gres/gpu=4"))
    assert change.message.endswith("(was none, none, none, none, no flags)")
    assert "MaxWall=-1" in change.argv


def test_the_cpu_qos_allows_no_gpu_and_the_labs_have_their_own(settings):
    specs = {spec.name: spec for spec in qos_specs(settings["cluster"])}
    assert list(specs) == ["portal", "cpu", "vision", "nlp"]
    assert specs["portal"] == PORTAL_QOS
    assert specs["cpu"] == QosSpec("cpu", "1-00:00:00", "", "gres/gpu=0", "")
    assert specs["nlp"] == QosSpec("nlp", "1-00:00:00", "gres/gpu=4", "", "")
    change = plan_qos("cpu|1-00:00:00||||DenyOnLimit\n", specs["cpu"])
    assert "MaxTRESPerJob=gres/gpu=0" in change.argv
    assert plan_qos("cpu|1-00:00:00||gres/gpu=0||DenyOnLimit\n", specs["cpu"]) is None


def test_qos_names_slurm_conf_gives_are_added_before_slurmctld_starts(settings):
    specs = qos_specs(settings["cluster"])
    changes = plan_qos_names("normal\nportal\nvision\n", specs)
    assert [c.argv for c in changes] == [
        ("sacctmgr", "-i", "add", "qos", "cpu"),
        ("sacctmgr", "-i", "add", "qos", "nlp"),
    ]
    assert plan_qos_names("portal\ncpu\nvision\nnlp\n", specs) == []


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"cpu_qos": "vision"}, "name a QOS twice"),
        ({"cpu_qos": "a b"}, "cpu_qos = 'a b'"),
        ({"accounts": [{"name": "portal", "group": "g", "qos": "q", "fairshare": 1}]}, "own"),
        ({"accounts": [{"name": "lab", "group": "g", "qos": "q"}]}, "fairshare is missing"),
        ({"accounts": [{"name": "lab", "group": "g", "qos": "q", "fairshare": 0}]}, "1 or more"),
        ({"accounts": [{"name": "lab", "group": "g;x", "qos": "q", "fairshare": 1}]}, "group"),
    ],
)
def test_accounts_and_qos_that_cannot_be_made_are_refused(settings, changes, message):
    settings["cluster"].update(changes)
    with pytest.raises(SetupError, match=message):
        qos_specs(settings["cluster"])


def test_registration_once():
    assert plan_registration("portal\n", "portal\n") == []
    changes = plan_registration("", "")
    assert [c.argv[2:5] for c in changes] == [
        ("add", "cluster", "portal"),
        ("add", "account", "portal"),
    ]
    assert changes[1].argv[-2:] == ("description=Data Scientist Portal", "organization=portal")


def test_lab_accounts_are_registered_once():
    names = ("portal", "lab-vision", "lab-nlp")
    assert plan_registration("portal\n", "root\nportal\nlab-vision\nlab-nlp\n", names) == []
    changes = plan_registration("portal\n", "root\nportal\nlab-vision\n", names)
    assert [c.argv[2:5] for c in changes] == [("add", "account", "lab-nlp")]


# ---------------------------------------------------------------- users


def test_parse_list_keeps_extra_separators_in_the_last_field():
    assert parse_list("a|b|c|d\n\n", 3) == [("a", "b", "c|d")]


def test_portal_groups_and_members():
    assert portal_groups([" CN = team ,ou=groups", "uid=x,ou=people", ""]) == [
        "team",
        "uid=x,ou=people",
    ]
    assert group_members("empty:*:20100:\n") == ([], [])
    assert group_members("g:*:1:a,b.c,_d") == (["a", "b.c", "_d"], [])


def test_users_in_sync_plan_nothing():
    plan = plan_users({"root", "portal", "alice", "bob"}, ASSOC)
    assert (plan.account, plan.add, plan.leaving) == (None, None, [])


def test_new_members_are_added_in_one_command_sorted():
    plan = plan_users({"root", "portal", "alice", "bob", "zoe", "dave"}, ASSOC)
    assert plan.add.argv == (
        "sacctmgr",
        "-i",
        "add",
        "user",
        "dave,zoe",
        "account=portal",
        "cluster=portal",
    )
    assert plan.add.message == "adding to account portal: dave zoe"


def test_members_who_left_are_leaving_once():
    listing = ASSOC + "bob|portal|portal\n"  # a second association (a partition's)
    plan = plan_users({"root", "portal", "alice"}, listing)
    assert plan.leaving == ["bob"]
    assert plan.add is None


def test_an_empty_account_gets_everyone():
    plan = plan_users({"root", "alice"}, "|portal|portal\n")
    assert plan.add.argv[4] == "alice,root"


def test_account_qos_that_differs_is_set():
    plan = plan_users({"root"}, "|normal|\nroot|portal|portal\n")
    assert plan.account.argv == (
        "sacctmgr",
        "-i",
        "modify",
        "account",
        "portal",
        "where",
        "cluster=portal",
        "set",
        "qos=portal",
        "defaultqos=portal",
    )
    assert plan.account.message == "account portal: QOS portal only (was normal, default none)"


def test_the_portal_account_takes_the_cpu_qos_beside_its_own(settings):
    spec = portal_account(settings["cluster"])
    assert (spec.qos, spec.default_qos) == (("cpu", "portal"), "portal")
    listing = "|portal|portal|1\nroot|portal|portal|1\n"
    plan = plan_users({"root"}, listing, spec)
    assert plan.account.argv[-3:] == ("set", "qos=cpu,portal", "defaultqos=portal")
    assert plan.account.message == (
        "account portal: QOS cpu,portal, default portal (was portal, default portal)"
    )
    # sacctmgr lists an account's QOS in its own order
    assert (
        plan_users({"root"}, "|portal,cpu|portal|1\nroot|cpu,portal|portal|1\n", spec).account
        is None
    )


def test_a_lab_account_gets_its_qos_fairshare_and_its_groups_members(settings):
    vision, nlp = lab_accounts(settings["cluster"])
    assert vision == AccountSpec("lab-vision", ("vision",), "vision", 60, "lab-vision")
    assert (nlp.name, nlp.group, nlp.fairshare) == ("lab-nlp", "lab-nlp", 40)
    plan = plan_users({"root", "portal", "alice", "carol"}, "|normal|normal|1\n", vision)
    assert plan.account.argv[2:] == (
        "modify", "account", "lab-vision", "where", "cluster=portal",
        "set", "qos=vision", "defaultqos=vision", "fairshare=60",
    )  # fmt: skip
    assert "(was normal, default normal, fairshare 1)" in plan.account.message
    assert plan.add.argv[3:] == ("user", "alice,carol,portal,root", "account=lab-vision",
                                 "cluster=portal")  # fmt: skip
    in_sync = "|vision|vision|60\n" + "".join(
        f"{u}|vision|vision|1\n" for u in ("alice", "carol", "portal", "root", "bob")
    )
    plan = plan_users({"root", "portal", "alice", "carol"}, in_sync, vision)
    assert (plan.account, plan.add, plan.leaving) == (None, None, ["bob"])
    busy, change = plan_removal(["bob"], "", "lab-vision")
    assert change.argv[-2:] == ("account=lab-vision", "cluster=portal")


def test_removal_waits_for_active_jobs():
    busy, change = plan_removal(["zed", "bob", "amy"], "bob\n")
    assert busy == ["bob"]
    assert change.argv[5] == "name=amy,zed"
    assert not change.fatal
    assert plan_removal(["bob"], "bob\n") == (["bob"], None)


def test_hub_admin_level():
    assert plan_admin_level("portal", "None\n") is None
    assert plan_admin_level("portal", "") is None
    assert plan_admin_level("", "Operator") is None
    change = plan_admin_level("portal", "Operator\n")
    assert change.argv == ("sacctmgr", "-i", "modify", "user", "portal", "set", "adminlevel=None")
    assert "(was Operator)" in change.message


def test_hub_uid_invalid():
    assert hub_uid_invalid("UserName=portal(4294967294) DefAccount=portal", "portal")
    assert not hub_uid_invalid("UserName=portal2(4294967294)", "portal")
    assert not hub_uid_invalid("", "")


# ---------------------------------------------------------------- the host layer


class FakeHost:
    """Answers slurm_setup.output as Slurm and NSS would (None: the command failed)."""

    def __init__(self, answers):
        self.answers = answers

    def __call__(self, argv, timeout=None):
        return self.answers.get(" ".join(argv))


ASSOC_FORMAT = "format=user,qos,defaultqos,fairshare"
ALL_QOS = QOS_OK + (
    "cpu|1-00:00:00||gres/gpu=0||DenyOnLimit\n"
    "vision|1-00:00:00|gres/gpu=4|||DenyOnLimit\n"
    "nlp|1-00:00:00|gres/gpu=4|||DenyOnLimit\n"
)
SERVICE = ("portal", "root")


def assoc(account, qos, share, users):
    return f"|{qos}|{qos.split(',')[-1]}|{share}\n" + "".join(
        f"{u}|{qos}|{qos.split(',')[-1]}|1\n" for u in users
    )


def fake_state(monkeypatch, **overrides):
    answers = {
        "getent group portal-users": "portal-users:*:20000:carol,bob,alice\n",
        "getent group portal-admins": "portal-admins:*:20010:carol\n",
        "getent group lab-vision": "lab-vision:*:20030:alice,carol\n",
        "getent group lab-nlp": "lab-nlp:*:20040:bob,carol\n",
        "getent group vision": "vision:*:20020:alice\n",
        f"sacctmgr -n -P list assoc account=portal cluster=portal {ASSOC_FORMAT}": assoc(
            "portal", "cpu,portal", "1", ("alice", "bob", "carol", *SERVICE)
        ),
        f"sacctmgr -n -P list assoc account=lab-vision cluster=portal {ASSOC_FORMAT}": assoc(
            "lab-vision", "vision", "60", ("alice", "carol", *SERVICE)
        ),
        f"sacctmgr -n -P list assoc account=lab-nlp cluster=portal {ASSOC_FORMAT}": assoc(
            "lab-nlp", "nlp", "40", ("bob", "carol", *SERVICE)
        ),
        "sacctmgr -n -P list user portal format=adminlevel": "None\n",
        "sacctmgr -n -P list qos format=name,maxwall,maxtrespu,maxtres,mintres,flags": ALL_QOS,
        "squeue -h -A portal -o %u": "",
        "scontrol -o show reservation": (
            "ReservationName=vision-course StartTime=2026-11-28T12:00:00 Nodes=n3 NodeCnt=1"
            " Flags=IGNORE_JOBS,SPEC_NODES Users=alice Groups=(null) Accounts=(null) State=ACTIVE\n"
        ),
    }
    answers.update(overrides)
    monkeypatch.setattr(slurm_setup, "output", FakeHost(answers))
    monkeypatch.setattr(subprocess, "run", pytest.fail)  # a dry run runs nothing


def test_dry_run_in_sync_prints_nothing(monkeypatch, capsys, settings):
    fake_state(monkeypatch)
    assert slurm_setup.sync_users(settings, slurm_setup.Runner(dry_run=True)) == 0
    assert slurm_setup.sync_reservations(settings, slurm_setup.Runner(dry_run=True)) == 0
    slurm_setup.ensure_qos(settings, slurm_setup.Runner(dry_run=True))
    assert capsys.readouterr().out == ""


def test_dry_run_prints_the_changes(monkeypatch, capsys, settings):
    fake_state(
        monkeypatch,
        **{
            "getent group portal-users": "portal-users:*:20000:carol,alice,dave,b@d\n",
            "getent group lab-nlp": "lab-nlp:*:20040:carol\n",
            "getent group vision": "vision:*:20020:alice,carol\n",
            "squeue -h -A portal -o %u": "eve\n",
            "sacctmgr -n -P list user portal format=adminlevel": "Operator\n",
        },
    )
    key = f"sacctmgr -n -P list assoc account=portal cluster=portal {ASSOC_FORMAT}"
    slurm_setup.output.answers[key] += "eve|cpu,portal|portal|1\n"
    assert slurm_setup.sync_users(settings, slurm_setup.Runner(dry_run=True)) == 0
    assert slurm_setup.sync_reservations(settings, slurm_setup.Runner(dry_run=True)) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "sacctmgr -i add user dave account=portal cluster=portal",
        "sacctmgr -i remove user where name=bob account=portal cluster=portal",
        "sacctmgr -i modify user portal set adminlevel=None",
        "sacctmgr -i remove user where name=bob account=lab-nlp cluster=portal",
        "scontrol update ReservationName=vision-course Nodes=n3 Users=alice,carol",
    ]
    assert "left out of group 'portal-users', not plain user names: b@d" in err
    assert "eve is no longer a member but has active jobs in account portal" in err


def test_a_group_that_does_not_resolve_changes_nothing_of_its_account(
    monkeypatch, capsys, settings
):
    fake_state(
        monkeypatch,
        **{
            "getent group portal-admins": None,
            "getent group portal-users": "portal-users:*:20000:alice\n",  # bob, carol left?
            "getent group lab-vision": "lab-vision:*:20030:alice\n",
        },
    )
    assert slurm_setup.sync_users(settings, slurm_setup.Runner(dry_run=True)) == 3
    out, err = capsys.readouterr()
    # the account portal is left as it is; lab-vision, whose group resolves, follows it
    assert out.splitlines() == [
        "sacctmgr -i remove user where name=carol account=lab-vision cluster=portal"
    ]
    assert "group 'portal-admins' does not resolve" in err
    assert "associations of account portal left as they are" in err


def test_the_reservation_is_made_for_the_groups_members(monkeypatch, capsys, settings):
    fake_state(monkeypatch, **{"scontrol -o show reservation": "No reservations in the system\n"})
    assert slurm_setup.sync_reservations(settings, slurm_setup.Runner(dry_run=True)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "scontrol create reservation ReservationName=vision-course StartTime=now Duration=UNLIMITED"
        " Nodes=n3 Users=alice Flags=IGNORE_JOBS"
    ]
    fake_state(monkeypatch, **{"scontrol -o show reservation": None})
    with pytest.raises(SetupError, match="slurmctld does not answer"):
        slurm_setup.sync_reservations(settings, slurm_setup.Runner(dry_run=True))


def test_reservation_plans():
    spec = ReservationSpec("course", "vision", ("n1", "n3"))
    shown = parse_reservations(
        "ReservationName=other Nodes=n2 Users=bob\n"
        "ReservationName=course StartTime=now Nodes=n[1,3] Users=alice State=ACTIVE\n"
    )
    assert plan_reservation(shown, spec, ["alice", "alice"], expand_hostlist) is None
    update = plan_reservation(shown, spec, ["bob", "alice"], expand_hostlist)
    assert update.argv == ("scontrol", "update", "ReservationName=course", "Nodes=n1,n3",
                           "Users=alice,bob")  # fmt: skip
    assert update.message == "reservation course: nodes n1,n3, users alice bob (was n[1,3], alice)"
    assert not update.fatal  # Slurm's reason is logged, the start goes on
    moved = plan_reservation(shown, ReservationSpec("course", "vision", ("n3",)), ["alice"],
                             expand_hostlist)  # fmt: skip
    assert moved.argv[3:] == ("Nodes=n3", "Users=alice")
    gone = plan_reservation(shown, spec, [], expand_hostlist)
    assert gone.argv == ("scontrol", "delete", "ReservationName=course")
    assert gone.message == "group vision has no member: deleting reservation course"
    assert plan_reservation({}, spec, [], expand_hostlist) is None


@pytest.mark.parametrize(
    "table, message",
    [
        ({"name": "r", "group": "g"}, "nodes is missing"),
        ({"name": "r", "group": "g", "nodes": []}, "nodes is empty"),
        ({"name": "r", "group": "a,b", "nodes": ["n3"]}, "use letters"),
        ({"name": "r", "group": "g", "nodes": ["n3"], "users": ["x"]}, "unknown key 'users'"),
    ],
)
def test_a_reservation_that_cannot_be_made_is_refused(table, message):
    with pytest.raises(SetupError, match=message):
        reservations({"reservations": [table]})


def test_slurmdbd_down_is_an_error(monkeypatch, settings):
    fake_state(
        monkeypatch,
        **{"sacctmgr -n -P list qos format=name,maxwall,maxtrespu,maxtres,mintres,flags": None},
    )
    with pytest.raises(SetupError, match="slurmdbd does not answer"):
        slurm_setup.ensure_qos(settings, slurm_setup.Runner(dry_run=True))


def test_write_if_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "chown", lambda *a: None)  # root:root, where not root
    path = tmp_path / "slurm.conf"
    assert slurm_setup.write_if_changed(path, f"{MARKER}\nA=1\n", 0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text(f"{MARKER}\nA=1\n\n")  # final newlines aside, the same
    assert not slurm_setup.write_if_changed(path, f"{MARKER}\nA=1\n")
    assert slurm_setup.write_if_changed(path, f"{MARKER}\nA=2\n")
    assert path.read_text() == f"{MARKER}\nA=2\n"
    assert not (tmp_path / "slurm.conf.tmp").exists()


def test_a_file_we_did_not_write_is_never_replaced(tmp_path):
    path = tmp_path / "slurm.conf"
    path.write_text("ClusterName=site\n")
    with pytest.raises(SetupError, match="was not written by this script"):
        slurm_setup.write_if_changed(path, f"{MARKER}\nA=1\n")
    assert path.read_text() == "ClusterName=site\n"


def test_gpu_devices_of_nodes_and_gpus_no_longer_configured_go(tmp_path, settings):
    root = tmp_path / "portal-gpu"
    (root / "n9").mkdir(parents=True)
    (root / "n1").mkdir()
    (root / "n1" / "gpu3").touch()
    (root / "n1" / "gpux").touch()
    (root / "n1" / "other").touch()
    (tmp_path / "portal-gpu0").touch()  # the single-host layout of old
    slurm_setup.make_gpu_devices(cluster(settings, nodes=2, node_gpus=0, **PLAIN), str(root))
    assert sorted(p.name for p in root.iterdir()) == ["n1", "n2"]
    assert [p.name for p in (root / "n1").iterdir()] == ["other"]
    assert not (tmp_path / "portal-gpu0").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_gpu_devices_are_made(tmp_path, settings):
    root = tmp_path / "portal-gpu"
    (root / "n1").mkdir(parents=True)
    (root / "n1" / "gpu1").touch()  # not a device: replaced
    slurm_setup.make_gpu_devices(cluster(settings, nodes=1, node_gpus=2, **PLAIN), str(root))
    for i in range(2):
        st = os.stat(root / "n1" / f"gpu{i}")
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, i)
