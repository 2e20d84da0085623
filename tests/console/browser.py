#!/usr/bin/env python3
"""The approvals console in a real browser (tests/console.rs runs it): Debian's Chromium, headless,
driven through Selenium and the system's chromedriver (nothing is downloaded), at a phone's width.

  browser.py CONSOLE_URL PROVIDER_DIR SHOTS CLOSE MOTOR

CONSOLE_URL is the console; PROVIDER_DIR the test OpenID provider's directory (people.json, the
server key's pin `spki`: the browser trusts exactly that key for the provider's HTTPS, nothing
else); SHOTS where each page's screenshot goes; CLOSE and MOTOR the ids of the proposals the test
made (a close, and a tier-3 purchase that needs two approvers). What each step saw is printed as
one JSON object on standard output; the test judges it, and the database, itself.
"""
import json
import os
import shutil
import sys
import tempfile
import time

# Never let Selenium look for (or fetch) a driver or a browser of its own.
os.environ.setdefault("SE_OFFLINE", "true")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import SessionNotCreatedException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ready  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def browser(provider_dir, profile):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("TOOLGATE_CHROMIUM", "/usr/bin/chromium")
    spki = open(os.path.join(provider_dir, "spki")).read().strip()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=412,915",
                f"--user-data-dir={profile}", f"--ignore-certificate-errors-spki-list={spki}",
                "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    service = Service(executable_path=os.environ.get("TOOLGATE_CHROMEDRIVER", "/usr/bin/chromedriver"))
    # Starting a headless Chromium now and then fails on a loaded machine before any page is
    # asked for (no DevTools port yet): that is the machine's, not the console's, so the start
    # alone is tried again, twice at most. Nothing after it is.
    for attempt in range(3):
        try:
            return webdriver.Chrome(service=service, options=options)
        except SessionNotCreatedException as e:
            sys.stderr.write(f"chromium did not start (attempt {attempt + 1}): {e.msg}\n")
            if attempt == 2:
                raise
            time.sleep(1)


class Person:
    def __init__(self, console, provider_dir, shots, username):
        self.console, self.shots, self.username = console, shots, username
        self.password = json.load(open(os.path.join(provider_dir, "people.json")))[username]["password"]
        self.profile = tempfile.mkdtemp(prefix="toolgate-console-browser-")
        self.driver = browser(provider_dir, self.profile)
        self.wait = WebDriverWait(self.driver, 20)

    def shot(self, name):
        # The whole page, as tall as it is.
        height = self.driver.execute_script("return document.body.scrollHeight")
        self.driver.set_window_size(412, max(915, min(height + 40, 4000)))
        self.driver.save_screenshot(os.path.join(self.shots, name))

    def sign_in(self, shot=None):
        sys.stderr.write(f"{self.username}: signs in\n")
        d = self.driver
        d.get(self.console + "/")
        if shot:
            self.shot(shot)
        d.find_element(By.CSS_SELECTOR, 'a[href="/login"]').click()
        self.wait.until(ready.presence_of_element_located((By.NAME, "username")))
        d.find_element(By.NAME, "username").send_keys(self.username)
        d.find_element(By.NAME, "password").send_keys(self.password)
        d.find_element(By.CSS_SELECTOR, 'button[value="approve"]').click()
        try:
            self.wait.until(ready.presence_of_element_located((By.TAG_NAME, "h1")))
        except Exception:
            sys.stderr.write(f"signing in as {self.username}: at {d.current_url}:\n{d.page_source[:3000]}\n")
            raise
        return d.find_element(By.TAG_NAME, "h1").text

    def cards(self):
        return [e.get_attribute("id") for e in self.driver.find_elements(By.CSS_SELECTOR, "article.card")]

    def card_text(self, proposal):
        return self.driver.find_element(By.ID, "p-" + proposal).text

    def decide(self, proposal, decision, word=None):
        sys.stderr.write(f"{self.username}: {decision} {proposal}\n")
        card = self.driver.find_element(By.ID, "p-" + proposal)
        if word is not None:
            card.find_element(By.NAME, "word").send_keys(word)
        page = self.driver.find_element(By.TAG_NAME, "html")
        card.find_element(By.CSS_SELECTOR, f'button[value="{decision}"]').click()
        try:
            # The page before the click may show a flash of its own (the last decision's): wait for
            # it to go, then for the next page's.
            self.wait.until(ready.staleness_of(page))
            self.wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "p.flash")))
        except Exception:
            d = self.driver
            sys.stderr.write(f"{self.username} deciding {proposal}: at {d.current_url}:\n{d.page_source[:3000]}\n")
            raise
        return self.driver.find_element(By.CSS_SELECTOR, "p.flash").text

    def history(self, shot):
        self.driver.find_element(By.CSS_SELECTOR, 'a[href="/history"]').click()
        self.wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "form.filter")))
        self.shot(shot)
        return [e.get_attribute("id") for e in self.driver.find_elements(By.CSS_SELECTOR, "article.card")]

    def sign_out(self):
        self.driver.find_element(By.CSS_SELECTOR, 'form[action="/logout"] button').click()
        self.wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, 'a[href="/login"]')))
        return self.driver.current_url

    def cookies(self):
        return self.driver.get_cookies()

    def close(self):
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)


def main():
    console, provider_dir, shots, close, motor = sys.argv[1:6]
    os.makedirs(shots, exist_ok=True)
    seen = {}

    joao = Person(console, provider_dir, shots, "joao")
    try:
        seen["joao_heading"] = joao.sign_in(shot="signin.png")
        seen["joao_cards"] = joao.cards()
        joao.shot("pending.png")
        seen["session_cookie"] = [
            {k: c.get(k) for k in ("name", "httpOnly", "secure", "sameSite")} for c in joao.cookies()]
        seen["token_in_cookie"] = any("eyJ" in c.get("value", "") for c in joao.cookies())
        seen["token_in_page"] = "eyJ" in joao.driver.page_source
        seen["close_flash"] = joao.decide(close, "approve")
        joao.shot("approved.png")
        motor_text = joao.card_text(motor)
        word = next(w.strip(".») ") for w in motor_text.split() if w.startswith("CONFIRMAR-"))
        seen["motor_wrong_word"] = joao.decide(motor, "approve", "CONFIRMAR-000000")
        seen["motor_first"] = joao.decide(motor, "approve", word)
        joao.shot("quorum.png")
        seen["joao_history"] = joao.history("history.png")
        seen["after_sign_out"] = joao.sign_out()
    finally:
        joao.close()

    maria = Person(console, provider_dir, shots, "maria")
    try:
        maria.sign_in()
        seen["maria_cards"] = maria.cards()
        maria.shot("requester.png")
    finally:
        maria.close()

    ana = Person(console, provider_dir, shots, "ana")
    try:
        ana.sign_in()
        seen["ana_quorum"] = ana.card_text(motor)
        seen["motor_second"] = ana.decide(motor, "approve", word)
        ana.shot("applied.png")
    finally:
        ana.close()

    iris = Person(console, provider_dir, shots, "iris")
    try:
        iris.sign_in()
        iris.driver.find_element(By.CSS_SELECTOR, 'a[href="/audit"]').click()
        iris.wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, "table.audit")))
        seen["audit_charts"] = len(iris.driver.find_elements(By.CSS_SELECTOR, "svg.chart"))
        iris.shot("audit.png")
    finally:
        iris.close()

    print(json.dumps(seen))


if __name__ == "__main__":
    main()
