"""``studio schedule github-cursor SCHEDULE [--reset | --set VALUE]`` as a subprocess."""

from __future__ import annotations

from conftest import Studio


def test_show_set_and_reset_the_cursor(studio: Studio) -> None:
    studio.seed("prs", trigger_type="github_poll", interval_sec=None, github_repo="octo/repo")
    shown = studio.run("schedule", "github-cursor", "prs")
    assert shown.stdout.strip() == "(none: the next poll replays the listing)"
    moved = studio.ok_json("schedule", "github-cursor", "prs", "--set", "2027-01-05T09:00:00Z#7")
    assert moved["github_cursor"] == "2027-01-05T09:00:00Z#0000000007"
    assert studio.run("schedule", "github-cursor", "prs").stdout.strip() == (
        "2027-01-05T09:00:00Z#0000000007"
    )
    assert studio.ok_json("schedule", "show", "prs")["github_cursor"] == moved["github_cursor"]
    reset = studio.run("schedule", "github-cursor", "prs", "--reset")
    assert reset.stdout.splitlines()[0] == "prs: github_cursor reset"
    assert studio.ok_json("schedule", "github-cursor", "prs")["github_cursor"] is None


def test_cursor_refusals_are_one_line(studio: Studio) -> None:
    studio.seed("plain")
    studio.seed("prs", trigger_type="github_poll", interval_sec=None, github_repo="octo/repo")
    assert "github_poll" in studio.fail("schedule", "github-cursor", "plain").error_line
    assert "github_poll" in studio.fail("schedule", "github-cursor", "plain", "--reset").error_line
    assert "--set" in studio.fail("schedule", "github-cursor", "prs", "--set", "soon").error_line
    assert (
        "exclusive"
        in studio.fail(
            "schedule", "github-cursor", "prs", "--reset", "--set", "2027-01-05T09:00:00Z"
        ).error_line
    )
    assert "not found" in studio.fail("schedule", "github-cursor", "nope").error_line
