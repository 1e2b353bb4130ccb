"""``python -m attnbook.bench 02 03 …``: run chapters' benchmark suites on a GPU and
record their results (every suite when no chapter is named, the peers' too:
``python -m attnbook.bench peers`` for FlexAttention alone; ``12``, chapter 12's, on an
H100 or H200, by name only).

``python -m attnbook.bench --cards [NAME …]``: print the design card of every package
kernel (or of those named), no GPU needed; ``--write-budgets`` writes today's figures
as ``bench/budgets.toml``.

An entry point above the layers: chapter 10's suite comes from :mod:`attnbook.models`.
"""
import sys


def main(argv):
    if "--cards" not in argv:
        from ..models import ALL_SUITES
        from .suites import HOPPER_SUITES, PEER_SUITES, main as run_suites
        suites = {**ALL_SUITES, **PEER_SUITES}
        run_suites(argv, {**suites, **HOPPER_SUITES} if argv else suites)
        return
    from . import cards
    names = [a for a in argv if not a.startswith("--")]
    specs = [s for s in cards.SPECS if not names or s.name in names]
    if names and len(specs) != len(names):
        raise SystemExit(f"no card among {names}; there are "
                         f"{[s.name for s in cards.SPECS]}")
    drawn = []
    for spec in specs:
        drawn.append(cards.design_card(spec))
        print(drawn[-1], end="\n\n", flush=True)
    print(cards.summary(drawn))
    if "--write-budgets" in argv:
        cards.BUDGETS.write_text(cards.budget_toml(drawn))
        print(f"wrote {cards.BUDGETS}")


main(sys.argv[1:])
