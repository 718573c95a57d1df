"""The spawn page in a real browser: the slice as the user chooses, what is
free now, and the expected start when the request cannot start now."""

import re

from playwright.sync_api import expect


def test_spawn_page_shows_slice_availability_and_expected_start(
    page, browser_login, session, hub, shot, one_free_node
):
    _node, total = one_free_node  # the other nodes are full
    browser_login(page, "alice")
    expect(page.locator("#profile")).to_be_visible()
    # the form remembers the last session's values; start from the profile's defaults
    page.select_option("#profile", "tensorflow")
    page.select_option("#profile", "pytorch")
    expect(page.locator("#hours")).to_have_value("8")
    page.select_option("#gpus", "2")
    expect(page.locator("#slice")).to_have_text(
        "2 GPUs = 16 cores + 96 GB, partition gpu, time limit 8:00:00"
    )
    expect(page.locator("#queue-note")).to_have_text("Can start now.")
    page.fill("#hours", "3")
    expect(page.locator("#slice")).to_contain_text("time limit 3:00:00")
    # the TensorFlow profile allows 2 GPUs at most
    page.select_option("#profile", "tensorflow")
    assert page.locator("#gpus option").count() == 2
    shot(page, "spawn-page")

    # fill the last node; the page then says when a 1-GPU session would start
    session("carol", profile="pytorch", gpus=4)
    for _ in range(20):
        page.goto(hub + "/hub/spawn")
        if (
            f"0 of {total}" in page.content()
            and "expected start" in page.locator("#queue-note").inner_text()
        ):
            break
        page.wait_for_timeout(1000)
    expect(page.locator("#availability")).to_contain_text(f"0 of {total}")
    page.select_option("#profile", "pytorch")
    page.select_option("#gpus", "1")
    expect(page.locator("#queue-note")).to_have_text(
        re.compile(
            r"No node has 1 GPU free now: the session will queue, expected start \w+ \d\d:\d\d\."
        )
    )
    shot(page, "spawn-page-full-node")


def test_nodes_are_offered_where_the_profile_allows_them_with_the_totals(page, browser_login):
    browser_login(page, "alice")
    page.select_option("#profile", "pytorch")
    expect(page.locator("#nodes-group")).to_be_hidden()
    page.select_option("#profile", "distributed")
    nodes = page.locator("#nodes option")
    if nodes.count() < 2:  # the partition has one node: nothing to choose
        expect(page.locator("#nodes-group")).to_be_hidden()
        return
    expect(page.locator("#nodes-group")).to_be_visible()
    expect(page.locator("label[for=gpus]")).to_have_text("GPUs per node")
    page.select_option("#nodes", "2")
    page.select_option("#gpus", "4")
    expect(page.locator("#slice")).to_have_text(
        "2 nodes × 4 GPUs = 8 GPUs, 64 cores, 384 GB, partition gpu, time limit 8:00:00"
    )
    page.select_option("#gpus", "1")
    expect(page.locator("#slice")).to_contain_text("2 nodes × 1 GPU = 2 GPUs, 16 cores, 96 GB")
    page.select_option("#profile", "pytorch")
    expect(page.locator("#nodes-group")).to_be_hidden()
    expect(page.locator("#slice")).to_contain_text("1 GPU = 8 cores + 48 GB")
