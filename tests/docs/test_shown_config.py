"""Configuration the docs show is the configuration the tests run."""

from __future__ import annotations

import re

from doc_commands import DOCS  # type: ignore[import-not-found]
from simia.testing.replicas import haproxy_config


def test_the_deployment_page_shows_the_haproxy_config_these_tests_run() -> None:
    page = (DOCS / "deployment.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```haproxy\n(.*?)```", page, re.S)
    assert len(blocks) == 1, "the Deployment page shows one HAProxy config"
    assert blocks[0] == haproxy_config(8080, ["127.0.0.1:8765", "127.0.0.1:8766"], sticky=True)
