"""The built book at a 1280-pixel-wide window: nothing in a page's text column is wider
than the column (code cells, outputs, display equations, tables, figures), so that the
reader never scrolls sideways.

Each page of ``_build/html`` (``jupyter-book build .``) is loaded in headless Chromium,
driven over its DevTools pipe, with MathJax typesetting the equations (a local MathJax
3: the pages load it from a CDN), and a script lists the elements that stick out of the
article element or scroll because their content is wider than they are."""
import fcntl
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
MATHJAX_CDN = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"
WINDOW = "1280,2000"

# Evaluated once the page has loaded: waits for MathJax and the fonts, then returns
# the column's width, how many equations MathJax typeset, and what is wider.
MEASURE = """(async () => {
  if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  await document.fonts.ready;
  const column = document.querySelector("article.bd-article");
  const box = column.getBoundingClientRect();
  const wide = [];
  for (const el of column.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || wide.some(w => w.contains(el))) continue;
    const style = getComputedStyle(el);   // an inline element has no clientWidth
    const scrolls = style.display !== "inline" && /auto|scroll/.test(style.overflowX);
    if (r.right > box.right + 1 || r.left < box.left - 1
        || (scrolls && el.scrollWidth > el.clientWidth + 1)) wide.push(el);
  }
  return {
    column: Math.round(box.width),
    typeset: document.querySelectorAll("mjx-container").length,
    wide: wide.map(el => ({
      element: el.tagName.toLowerCase() + (typeof el.className === "string"
        && el.className ? "." + el.className.trim().split(/\\s+/).join(".") : ""),
      width: Math.max(Math.round(el.getBoundingClientRect().width), el.scrollWidth),
      text: el.textContent.trim().slice(0, 70)}))};
})()"""

def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def local_mathjax():
    """MathJax 3's tex-mml-chtml.js on this machine: $ATTNBOOK_MATHJAX, or an npm
    install of mathjax@3 in the repository's node_modules."""
    for path in (os.environ.get("ATTNBOOK_MATHJAX"),
                 ROOT / "node_modules" / "mathjax" / "es5" / "tex-mml-chtml.js"):
        if path and pathlib.Path(path).is_file():
            return pathlib.Path(path).resolve()
    return None


def pages():
    return sorted(HTML.glob("book/*.html")) if HTML.is_dir() else []


def offline(page: pathlib.Path, mathjax: pathlib.Path) -> str:
    """The page's HTML, loadable from anywhere without a network: resources relative
    to its own folder, MathJax from ``mathjax``, no other remote scripts (the widgets'
    loaders)."""
    text = page.read_text().replace(MATHJAX_CDN, mathjax.as_uri())
    text = re.sub(r'<script[^>]*src="https?://[^"]*"[^>]*>\s*</script>', "", text)
    return text.replace("<head>", f'<head><base href="{page.parent.as_uri()}/">', 1)


class Browser:
    """Headless Chromium over --remote-debugging-pipe: commands are JSON messages, each
    ended by a NUL byte, written to its fd 3 and answered on its fd 4."""

    def __init__(self, profile: pathlib.Path):
        to_browser, self._commands = os.pipe()
        self._answers, from_browser = os.pipe()

        def pipes():   # in the child, by way of fds above 9: either may be 3 or 4
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
                    for fd in (to_browser, from_browser)]
            for fd, wanted in zip(high, (3, 4)):
                os.dup2(fd, wanted)

        self.process = subprocess.Popen(
            [chromium(), "--headless", "--disable-gpu", "--no-sandbox",
             "--allow-file-access-from-files", "--hide-scrollbars",
             f"--window-size={WINDOW}", f"--user-data-dir={profile}",
             "--remote-debugging-pipe", "about:blank"],
            preexec_fn=pipes, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._reader, self._id, self._buffer = os.fdopen(self._answers, "rb"), 0, b""

    def send(self, method, session=None, **params):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:   # events come in between: skip them
            while b"\0" not in self._buffer:
                chunk = self._reader.read1(1 << 16)
                assert chunk, "Chromium closed its DevTools pipe"
                self._buffer += chunk
            text, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(text)
            if answer.get("id") == self._id:
                assert "error" not in answer, f"{method}: {answer['error']}"
                return answer["result"]

    def evaluate(self, session, expression):
        result = self.send("Runtime.evaluate", session, expression=expression,
                           awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def measure(self, url: str) -> dict:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target,
                            flatten=True)["sessionId"]
        self.send("Page.navigate", session, url=url)
        deadline = time.monotonic() + 60
        while True:   # until the page, not about:blank, has loaded
            state = self.send("Runtime.evaluate", session, returnByValue=True,
                              expression="location.href + ' ' + document.readyState")
            if state.get("result", {}).get("value") == f"{url} complete":
                break
            assert time.monotonic() < deadline, f"{url} did not load in 60 s"
            time.sleep(0.1)
        report = self.evaluate(session, MEASURE)
        self.send("Target.closeTarget", targetId=target)
        return report

    def close(self):
        self.process.kill()
        self.process.wait()
        os.close(self._commands)
        self._reader.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.mark.skipif(not pages(), reason="no built book in _build/html "
                    "(jupyter-book build .)")
@pytest.mark.skipif(chromium() is None, reason="no chromium on PATH")
@pytest.mark.skipif(local_mathjax() is None, reason="no local MathJax 3 (npm install "
                    "mathjax@3, or set ATTNBOOK_MATHJAX to its es5/tex-mml-chtml.js)")
@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_nothing_is_wider_than_the_text_column(page, browser, tmp_path):
    copy = tmp_path / page.name
    copy.write_text(offline(page, local_mathjax()))
    report = browser.measure(copy.as_uri())
    if 'class="math' in page.read_text():
        assert report["typeset"], f"{page.name}: MathJax typeset nothing"
    assert not report["wide"], (
        f"{page.name}: wider than the {report['column']}-pixel column: "
        + "; ".join(f"{w['element']} {w['width']} px {w['text']!r}"
                    for w in report["wide"]))


@pytest.mark.skipif(not pages(), reason="no built book in _build/html "
                    "(jupyter-book build .)")
@pytest.mark.parametrize("chapter", ["02_first_cuda_kernels", "04_tiling",
                                     "07_fused_fp32_kernel", "08_tensor_cores",
                                     "09_decoding", "11_backward",
                                     "B1_sanitizer_and_profiler"])
def test_recorded_results_are_tables_on_the_page(chapter):
    """A results table is Markdown a cell outputs: read as CommonMark (myst-nb's
    default), its rows were one paragraph of pipes; the book reads GitHub's dialect."""
    text = (HTML / "book" / f"{chapter}.html").read_text()
    tables = re.findall(r"<table.*?</table>", text, re.S)
    # a results table's heading names a case (S; chapter 9's L) or the implementation
    assert any(">S<" in t or ">L<" in t or "implementation" in t for t in tables), \
        chapter
    assert not re.search(r"<p>\|", text), chapter
