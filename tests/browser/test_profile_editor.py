"""The profile editor in a real browser: an admin edits a profile, the form
refuses a value the cluster cannot hold, the save shows in the history, and a
user's spawn page offers the new limit at once."""

import subprocess

from playwright.sync_api import expect

SERVICE = "/services/portal/"


def test_admin_edits_a_profile_and_sees_the_history(page, browser, browser_login, hub, shot):
    browser_login(page, "carol")
    page.click("#nav-profiles")  # from the hub's navigation bar
    page.wait_for_url(f"**{SERVICE}profiles")
    expect(page.locator("#profile-pytorch")).to_contain_text("PyTorch")
    shot(page, "profiles-list")

    page.click("#profile-vision >> text=Edit")
    expect(page.locator("#lines")).to_contain_text("--gres=gpu:2 --cpus-per-task=8 --mem=96G")
    # a value the cluster cannot hold: said before saving, and again on save
    page.fill("#mem_per_gpu_gb", "1000")
    expect(page.locator("#check-error")).to_contain_text("mem_per_gpu_gb 1000")
    expect(page.locator("#mem_per_gpu_gb")).to_have_class("form-control is-invalid")
    page.click("#save")
    expect(page.locator("#form-error")).to_contain_text("no node of 'gpu'")
    expect(page.locator("#mem_per_gpu_gb")).to_have_value("1000")  # nothing typed is lost
    shot(page, "profile-form-validation")

    page.fill("#mem_per_gpu_gb", "48")
    page.fill("#max_gpus", "1")
    expect(page.locator("#lines")).not_to_contain_text("--gres=gpu:2")
    page.click("#save")
    expect(page.locator("#message")).to_contain_text("Saved profile vision")
    expect(page.locator("#profile-vision")).to_contain_text("1–1")

    page.click("#profile-vision >> text=History")
    row = page.locator(".history-row").first
    expect(row).to_contain_text("carol")
    expect(row).to_contain_text("max_gpus: 2 → 1")
    shot(page, "profile-history")

    # alice (in the vision group) is offered 1 GPU for it now
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    alice = context.new_page()
    browser_login(alice, "alice")
    alice.select_option("#profile", "vision")
    assert alice.locator("#gpus option").count() == 1
    context.close()

    # put it back from the history: one click
    page.click("text=Revert to revision 1")
    expect(page.locator("#message")).to_contain_text("reverted to revision 1")
    expect(page.locator("#profile-vision")).to_contain_text("1–2")


def test_the_cluster_page(page, browser_login, hub, shot):
    browser_login(page, "bob")
    # not in a user's navigation (admins': Profiles, Images, Cluster), but theirs to open
    assert page.locator("#nav-cluster").count() == 0
    page.goto(hub + SERVICE + "cluster")
    # each partition's table lists each of its nodes (a node is in several)
    for line in subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%R %N"], capture_output=True, text=True, check=True
    ).stdout.splitlines():
        partition, node = line.split()
        expect(page.locator(f'.partition[data-partition="{partition}"]')).to_contain_text(node)
    expect(page.locator("#sessions")).to_have_count(0)
    shot(page, "cluster-page")
