"""What the site's Slurm lets a user choose for a profile (issue 38): the
partition, the GPU model, the account, the QOS, a reservation, a node
feature, or no GPU at all.

One reading serves the page and the checks alike: ``offer`` lists every
choice of a profile, each with the reason it cannot be taken ("" when it
can), for the spawn page to show disabled; ``check`` refuses a request
whose choice the offer would show disabled, with that reason, naming the
field. The form, spawn links, the REST API and notebook jobs all pass
through ``check`` (the hub's ``PortalSpawner.apply_options`` and its
submission, ``portal.notebookjobs``), just before sbatch.

Both read what the shared poll knows: its sinfo (``partitions``: typed GRES
and features per node) and its catalog of the site's accounting
(``catalog``: ``portal.slurm.model.SiteCatalog``: associations, QOS,
fairshare, reservations, partitions' Allow/Deny lists), read for all users
at once, never per page. Pure functions of those.
"""

from dataclasses import replace

from portal.core.slice import CHOICE_LABELS, SliceError


def _models(partition, nodes=None):
    """``{model: GpuModel}`` of a partition's typed GRES ("" untyped left
    out), on its ``nodes`` (names; None: all)."""
    return {name: model for name, model in partition.gpu_models(nodes).items() if name}


def _features(partition):
    return sorted({f for node in partition.nodes for f in node.features})


def _model_on_node(partition, model):
    """The most GPUs of ``model`` one node of ``partition`` has."""
    return max(
        (total for node in partition.nodes for t, total, _used in node.gpu_types
         if t == model),
        default=0,
    )  # fmt: skip


def without_gpus(partition, catalog):
    """Whether ``partition`` takes jobs without GPUs only: none of its nodes
    has one, or its own QOS allows none per job (``SiteCatalog.cpu_only``)."""
    return not partition.gpus or bool(catalog and catalog.cpu_only(partition.name))


def partition_refusal(profile, job_slice, partitions, catalog=None):
    """Why ``job_slice`` cannot run on its partition as the cluster is now
    ("" when it can), and the field to name; ("", "") when the cluster is
    not known yet (sbatch is the judge then)."""
    partition = partitions.get(job_slice.partition)
    if not partitions:
        return "", ""
    if partition is None:
        return f"Partition {job_slice.partition} does not exist on this cluster", "partition"
    cpu = without_gpus(partition, catalog)
    if job_slice.gpus and cpu:
        return (
            f"Partition {partition.name} has no GPUs: choose no GPU there, or a partition "
            "with GPUs",
            "gpus",
        )
    if not job_slice.gpus and not cpu:
        cpus = [
            p for p in profile.all_partitions
            if p in partitions and without_gpus(partitions[p], catalog)
        ]  # fmt: skip
        where = f" ({', '.join(cpus)})" if cpus else ""
        return (
            f"A session without GPUs runs on a partition without GPUs{where}, not {partition.name}",
            "partition",
        )
    model = job_slice.gpu_type
    if model:
        models = _models(partition)
        if model not in models:
            known = ", ".join(sorted(models)) or "none typed"
            return (
                f"GPU model {model} is not on partition {partition.name} (models there: {known})",
                "gpu_type",
            )
        most = _model_on_node(partition, model)
        if job_slice.gpus > most:
            return (
                f"No node of partition {partition.name} has {job_slice.gpus} {model} GPUs "
                f"(at most {most})",
                "gpus",
            )
    if job_slice.feature and job_slice.feature not in _features(partition):
        return (
            f"No node of partition {partition.name} has the feature {job_slice.feature}",
            "feature",
        )
    if job_slice.gpus and job_slice.feature:
        # the feature's nodes must hold the GPUs (of the model) on one node
        nodes = [n for n in partition.nodes if job_slice.feature in n.features]
        most = max((_gpus_of(n, model) for n in nodes), default=0)
        if job_slice.gpus > most:
            return (
                f"No node of partition {partition.name} with the feature {job_slice.feature} "
                f"has {job_slice.gpus} {model + ' ' if model else ''}GPUs (at most {most})",
                "feature",
            )
    return "", ""


def _gpus_of(node, model=""):
    """The GPUs of ``model`` (any model: "") a node has."""
    if not model:
        return node.gpus
    return sum(total for t, total, _used in node.gpu_types if t == model)


def accounting_refusal(job_slice, catalog, user, now, groups=()):
    """Why the account, QOS or reservation of ``job_slice`` cannot be used
    by ``user`` (a member of ``groups``) ("" when they can), and the field
    to name. Without a QOS named, the one Slurm would give the job (the
    association's usual one) is checked: ``complete`` names another where
    that one would refuse the job."""
    chosen = {
        k: v for k, v in job_slice.choices().items() if k in ("account", "qos", "reservation")
    }
    if catalog is None:
        if not chosen:
            return "", ""
        field = next(iter(chosen))
        return (
            f"The cluster's accounts are not read yet, so {CHOICE_LABELS[field].lower()} "
            f"{chosen[field]} cannot be checked: try again in a moment",
            field,
        )
    accounts = catalog.accounts_of(user)
    account = job_slice.account or (accounts[0] if accounts else "")
    if not account:
        return "", ""  # no association known: Slurm's own refusal says why
    if job_slice.account:
        reason = catalog.account_refusal(user, job_slice.account, job_slice.partition)
        if reason:
            return reason, "account"
    reasons = dict(catalog.qos_choices(user, account, job_slice.partition, job_slice.total_gpus))
    qos = job_slice.qos or usual_qos(catalog, user, account, job_slice.partition)
    if job_slice.qos and job_slice.qos not in reasons:
        return (
            f"QOS {job_slice.qos} is not one of account {account}'s on partition "
            f"{job_slice.partition}",
            "qos",
        )
    if qos and reasons.get(qos):
        return reasons[qos], "qos"
    if job_slice.reservation:
        reason = catalog.reservation_refusal(
            job_slice.reservation, user, [account], now, list(groups)
        )
        if reason:
            return reason, "reservation"
        held = next(r for r in catalog.reservations if r.name == job_slice.reservation)
        if held.partition and held.partition != job_slice.partition:
            return (
                f"Reservation {held.name} is on partition {held.partition}, not "
                f"{job_slice.partition}",
                "reservation",
            )
    return "", ""


def usual_qos(catalog, user, account, partition):
    """The QOS Slurm gives a job of ``user`` in ``account`` on ``partition``
    that names none (its association's usual one), or ""."""
    assoc = catalog.association(user, account, partition)
    return assoc.usual_qos if assoc else ""


def complete(job_slice, catalog, user):
    """``job_slice`` with the QOS named where it names none and the one
    Slurm would give it refuses it while another of the user's is allowed
    (a session without GPUs under a QOS that needs one: the demo's account
    ``portal`` and its QOS ``cpu``), so that the user need not know it."""
    if job_slice.qos or catalog is None:
        return job_slice
    accounts = catalog.accounts_of(user)
    account = job_slice.account or (accounts[0] if accounts else "")
    if not account:
        return job_slice
    reasons = dict(catalog.qos_choices(user, account, job_slice.partition, job_slice.total_gpus))
    usual = usual_qos(catalog, user, account, job_slice.partition)
    if not usual or not reasons.get(usual):
        return job_slice
    better = catalog.default_qos(user, account, job_slice.partition, job_slice.total_gpus)
    return replace(job_slice, qos=better) if better else job_slice


def reservation_nodes_refusal(job_slice, catalog, partitions):
    """Why the reservation's nodes cannot take the session (none of them in
    its partition), "" when they can or are not known."""
    if not job_slice.reservation or catalog is None or not partitions:
        return ""
    held = next((r for r in catalog.reservations if r.name == job_slice.reservation), None)
    partition = partitions.get(job_slice.partition)
    if held is None or partition is None or not held.nodes:
        return ""
    nodes = [n for n in partition.nodes if n.name in held.nodes]
    if not nodes:
        return (
            f"Reservation {held.name} holds {', '.join(held.nodes)}, none of partition "
            f"{partition.name}"
        )
    most = max(_gpus_of(n, job_slice.gpu_type) for n in nodes)
    if job_slice.gpus > most:
        model = f"{job_slice.gpu_type} " if job_slice.gpu_type else ""
        return (
            f"Reservation {held.name}'s nodes ({', '.join(held.nodes)}) have at most "
            f"{most} {model}GPUs each, not {job_slice.gpus}"
        )
    return ""


def check(profile, job_slice, partitions, catalog, user, now, groups=()):
    """Refuse, with SliceError naming the field, a ``job_slice`` of
    ``profile`` that the site's Slurm would refuse or never start for
    ``user`` (a member of ``groups``): what ``offer`` shows disabled;
    nothing when it fits."""
    reason, field = partition_refusal(profile, job_slice, partitions, catalog)
    if not reason:
        reason, field = accounting_refusal(job_slice, catalog, user, now, groups)
    if not reason:
        reason, field = reservation_nodes_refusal(job_slice, catalog, partitions), "reservation"
    if reason:
        raise SliceError(reason, field)


# -- the page ------------------------------------------------------------------


def offer(profile, partitions, catalog, user, now, last=None, gpu_memory=None, groups=()):
    """The site's choices of ``profile`` for ``user``, as the spawn page
    shows them (JSON-able), each with ``reason`` ("" when it can be taken):

    - ``partitions``: its partitions, each with ``gpus`` (whether it has
      any), its GPU ``models`` (free, total, most free on one node, memory
      where the site declares it in ``gpu_memory``) and node ``features``;
    - ``accounts``: the user's accounts, the ``last`` one used first (else
      their default), each with its fairshare and GPU-hours, and its reason
      per partition;
    - ``qos``: per account and partition, each QOS with its limits and reason;
    - ``reservations``: the active and upcoming ones, with their window,
      nodes and reason (per partition: none of its nodes there).
    """
    last = last or {}
    gpu_memory = gpu_memory or {}
    # nodes an active reservation holds: free only to a session in it
    held_now = [r for r in catalog.reservations if r.active(now)] if catalog else []
    reserved = {node for r in held_now for node in r.nodes}
    parts = []
    for name in profile.all_partitions:
        partition = partitions.get(name)
        if partition is None:
            parts.append({"name": name, "gpus": None, "models": [], "features": [],
                          "reason": "Not known to the cluster now"})  # fmt: skip
            continue
        features = [
            f for f in _features(partition) if not profile.features or f in profile.features
        ]
        gpus = not without_gpus(partition, catalog)
        reason = "" if gpus or profile.cpu_sessions else "No GPUs here, and no sessions without"
        largest = partition.largest_node
        everyone = {n.name for n in partition.nodes} - reserved
        parts.append({
            "name": name, "gpus": gpus,
            **free_view(partition, everyone, profile, gpu_memory),
            "features": features if "feature" in profile.choose else [],
            "reason": reason,
            "total": partition.gpus,
            "offered_gpus": max(1, min(profile.max_gpus, largest.gpus if largest else 0)),
            "offered_nodes": max(1, min(profile.max_nodes, len(partition.nodes))),
            "cores": min(profile.max_cores, max((n.cpus for n in partition.nodes), default=0)),
            "mem_gb": min(profile.max_mem_gb,
                          max((n.mem_mb for n in partition.nodes), default=0) // 1024),
        })  # fmt: skip
    result = {"partitions": parts, "accounts": [], "qos": {}, "reservations": [],
              "catalog": catalog is not None}  # fmt: skip
    if catalog is None:
        return result
    accounts = catalog.accounts_of(user)
    if last.get("account") in accounts:
        accounts = [last["account"], *(a for a in accounts if a != last["account"])]
    names = [p["name"] for p in parts]
    chosen_accounts = accounts if "account" in profile.choose else accounts[:1]
    # the QOS of a session naming none, per account and partition (a
    # session of 1 GPU, or none on a partition without)
    gpus_of = {p["name"]: 1 if p["gpus"] else 0 for p in parts}
    result["usual_qos"] = {
        account: {p: usual_choice(catalog, user, account, p, gpus_of[p]) for p in names}
        for account in chosen_accounts
    }
    if "account" in profile.choose:
        for account in accounts:
            share = catalog.shares.get((account, user))
            reasons = {p: catalog.account_refusal(user, account, p) for p in names}
            if "qos" not in profile.choose:  # its usual QOS is the only one
                usual = result["usual_qos"][account]
                reasons = {p: reasons[p] or usual[p]["reason"] for p in names}
            result["accounts"].append({
                "name": account,
                "fairshare": round(share.fairshare, 3) if share else None,
                "gpu_hours": round(share.gpu_hours, 1) if share else None,
                "reasons": reasons,
            })  # fmt: skip
    if "qos" in profile.choose:
        for account in chosen_accounts:
            result["qos"][account] = {
                p: [
                    {"name": q, "limits": _qos_limits(catalog, q), "reason": reason}
                    for q, reason in catalog.qos_choices(user, account, p, gpus_of[p])
                ]
                for p in names
            }
    if "reservation" in profile.choose:
        for held, reason in catalog.reservation_choices(user, accounts, now, list(groups)):
            reasons = {}
            for p in names:
                partition = partitions.get(p)
                nodes = {n.name for n in partition.nodes} if partition else set()
                if reason:
                    reasons[p] = reason
                elif held.partition and held.partition != p:
                    reasons[p] = f"On partition {held.partition}"
                elif held.nodes and not set(held.nodes) & nodes:
                    reasons[p] = f"Its nodes ({', '.join(held.nodes)}) are not in {p}"
                else:
                    reasons[p] = ""
            free = {
                p: free_view(partitions[p], set(held.nodes), profile, gpu_memory)
                for p in names if p in partitions and not reasons[p]
            }  # fmt: skip
            result["reservations"].append({
                "name": held.name, "window": held.window(), "nodes": list(held.nodes),
                "active": held.active(now), "reasons": reasons, "free": free,
            })  # fmt: skip
    return result


def free_view(partition, names, profile, gpu_memory):
    """What is free on the nodes ``names`` of ``partition`` for the page:
    GPUs free, the most on one node, each node's free GPUs (most first),
    and the profile's GPU ``models`` there (free, total, most free on one
    node, most on one node, memory where the site declares it)."""
    nodes = [n for n in partition.nodes if n.name in names]
    models = [
        {
            "type": m.type,
            "free": m.free,
            "total": m.total,
            "largest_free": m.largest_free,
            "most_on_node": max(
                (t for n in nodes for kind, t, _used in n.gpu_types if kind == m.type), default=0
            ),
            "memory_gb": gpu_memory.get(m.type),
        }
        for m in sorted(_models(partition, names).values(), key=lambda m: m.type)
        if not profile.gpu_types or m.type in profile.gpu_types
    ]
    return {
        "free": sum(n.gpus_free for n in nodes),
        "largest_free": max((n.gpus_free for n in nodes), default=0),
        "nodes_free": sorted((n.gpus_free for n in nodes), reverse=True),
        "models": models,
    }


def usual_choice(catalog, user, account, partition, gpus):
    """The QOS a session of ``user`` in ``account`` on ``partition`` that
    names none runs under (``complete``'s choice where the usual one would
    refuse it), and why it cannot ("" when it can): the page's "account's
    default"."""
    usual = usual_qos(catalog, user, account, partition)
    reasons = dict(catalog.qos_choices(user, account, partition, gpus))
    if not usual or not reasons.get(usual):
        return {"name": usual, "reason": ""}
    better = catalog.default_qos(user, account, partition, gpus)
    return {"name": better, "reason": ""} if better else {"name": usual, "reason": reasons[usual]}


def offered_qos(found):
    """Every QOS an ``offer`` names: its accounts' usual ones and the choices.

    >>> offered_qos({"usual_qos": {"a": {"gpu": {"name": "n", "reason": ""}}},
    ...              "qos": {"a": {"gpu": [{"name": "m", "limits": "", "reason": "x"}]}}})
    ['m', 'n']
    """
    names = {u["name"] for a in found.get("usual_qos", {}).values() for u in a.values()}
    names |= {q["name"] for a in found.get("qos", {}).values() for qs in a.values() for q in qs}
    return sorted(n for n in names if n)


def _qos_limits(catalog, name):
    qos = catalog.qos.get(name)
    return qos.describe() if qos else ""
