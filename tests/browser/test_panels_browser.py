"""The lifecycle and partitions panels opened in headless Chromium: cards, plots, tables, links."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rtmatrix.report import render_report
from rtmatrix.results import validate_run
from tests.browser.runs import lifecycle_run, partition_run
from tests.browser.test_report_browser import Page, _full_page_screenshot, _take_alerts

if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def panels(
    browser: WebDriver, tmp_path_factory: pytest.TempPathFactory, screenshot_dir: Path
) -> Page:
    lc, parts = lifecycle_run(), partition_run()
    validate_run(lc)
    validate_run(parts)
    index = render_report([lc, parts], tmp_path_factory.mktemp("panels"))
    browser.get(index.as_uri())
    alerts = _take_alerts(browser, wait_s=0.5)
    console = list(browser.get_log("browser"))  # type: ignore[no-untyped-call]  # read once
    shot = screenshot_dir / "panels.png"
    _full_page_screenshot(browser, shot)
    print(f"screenshot: {shot}")
    return Page(browser, lc, parts, console, shot, alerts)


def _css(page: Page, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(page.driver.find_elements(By.CSS_SELECTOR, selector))


def test_panels_page_is_inert_and_clean(panels: Page) -> None:
    assert not panels.alerts
    assert panels.driver.execute_script("return document.scripts.length") == 1
    severe = [e for e in panels.console if e.get("level") == "SEVERE"]
    assert not severe, severe


def test_lifecycle_panel_and_its_plots_render(panels: Page) -> None:
    cards = _css(panels, "#lifecycle article.lifecycle")
    assert [c.get_attribute("data-scenario") for c in cards] == [
        "stream",
        "cancel",
        "serve",
        "serve",
    ]
    assert all(c.is_displayed() for c in cards)
    for name in ("serve-ttft", "cancel-leak"):
        (svg,) = _css(panels, f'#lifecycle svg.plot[data-plot="{name}"]')
        assert svg.is_displayed()
        assert svg.size["width"] > 300 and svg.size["height"] > 150
        assert "concurrent streams" in svg.text or "cancel cycle" in svg.text  # text, not paths
    (bad,) = _css(panels, '#lifecycle li.bad[data-check="cancel_close_rss_leak"]')
    assert bad.is_displayed()
    assert bad.value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"
    levels = _css(panels, '#lifecycle table[data-table="per concurrency"] tbody tr')
    assert [r.get_attribute("data-row") for r in levels] == ["1", "2", "4"]
    leak = _css(panels, '#lifecycle table[data-table="cancel modes"] tr[data-row="close"]')[0]
    assert "tolerance 1.0 MiB" in leak.text
    assert "no data" in cards[-1].text  # the serve cell that never measured


def test_lifecycle_card_links_to_its_evidence(panels: Page) -> None:
    from selenium.webdriver.common.by import By

    card = _css(panels, '#lifecycle article[data-scenario="cancel"]')[0]
    link = card.find_element(By.LINK_TEXT, "evidence")
    target = (link.get_attribute("href") or "").split("#", 1)[1]
    link.click()
    panel = panels.driver.find_element(By.ID, target)
    assert panel.get_attribute("open") is not None and "tiny-cancel" in panel.text


def test_partitions_panel_tables_render(panels: Page) -> None:
    from selenium.webdriver.common.by import By

    cover = _css(panels, '#partitions table[data-table="coverage vs boundaries"] tbody tr')
    assert len(cover) == 5 and all(r.is_displayed() for r in cover)
    slower = _css(panels, '#partitions table[data-table="delegate on vs off"] tr.slower')
    assert len(slower) == 1 and "delegate slower: PP, TG" in slower[0].text
    (details,) = _css(panels, "#partitions details.partitions")
    assert not _css(panels, '#partitions details.partitions table[data-table="partitions"] tr')[
        0
    ].is_displayed()
    details.find_element(By.TAG_NAME, "summary").click()
    rows = details.find_elements(By.CSS_SELECTOR, 'table[data-table="partitions"] tbody tr')
    assert len(rows) == 5 and all(r.is_displayed() for r in rows)


def test_panels_screenshot_kept(panels: Page) -> None:
    assert panels.screenshot.stat().st_size > 10_000
