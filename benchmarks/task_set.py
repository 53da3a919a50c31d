"""The tasks of ``local_tasks.py``: 32 small tasks in four groups, built from a seed.

Every answer is computed here from data drawn from the seed, so a model cannot
know it by heart. A task is one or two user messages (``followup``: the second
depends on the state the first left), files to write into its workspace, and
the expected answer of its last message with a checker:

- ``int``: the answer holds the number (commas and spaces in it ignored),
  and at most four distinct numbers, so a list of guesses fails;
- ``float``: the same within a relative tolerance of 1e-3 (or 0.01 absolute);
- ``text``: the expected words appear in the answer, case and punctuation ignored.
"""

from __future__ import annotations

import calendar
import collections
import csv
import datetime as dt
import io
import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

GROUPS = ("oneshot", "text", "files", "followup")
WORDS = [
    "river",
    "stone",
    "maple",
    "cloud",
    "harbor",
    "lantern",
    "meadow",
    "copper",
    "violet",
    "orbit",
    "canyon",
    "falcon",
    "willow",
    "ember",
    "glacier",
    "pepper",
    "thistle",
    "marble",
    "saddle",
    "quartz",
    "tundra",
    "beacon",
    "walnut",
    "cobalt",
]
WEEKDAYS = list(calendar.day_name)


@dataclass
class Task:
    id: str
    group: str
    prompts: list[str]
    expected: str
    kind: str = "int"
    files: dict[str, str] = field(default_factory=dict)

    def check(self, answer: str | None) -> bool:
        return check(self.kind, self.expected, answer)


def numbers(text: str) -> list[float]:
    joined = re.sub(r"(?<=\d)[,_ ](?=\d{3}\b)", "", text)
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", joined)]


def check(kind: str, expected: str, answer: str | None) -> bool:
    """Whether ``answer`` is right (see the module docstring)."""
    if not answer:
        return False
    if kind == "text":
        return f" {normalised(expected)} " in f" {normalised(answer)} "
    found = numbers(answer)
    if not found or len(set(found)) > 4:
        return False
    want = float(expected)
    if kind == "int":
        return any(n == want for n in found)
    return any(math.isclose(n, want, rel_tol=1e-3, abs_tol=0.01) for n in found)


def normalised(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9\-]+", " ", text.lower()).split())


def date(rng: random.Random) -> dt.date:
    return dt.date(1900, 1, 1) + dt.timedelta(days=rng.randrange(0, 200 * 365))


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def table(header: list[str], rows: Sequence[Sequence[object]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


# -- one-shot computation -----------------------------------------------------------


def oneshot(rng: random.Random) -> list[Task]:
    a, b = rng.randrange(100, 400), rng.randrange(600, 1500)
    n = rng.randrange(20000, 60000)
    base, exp, mod = (
        rng.randrange(1000, 9999),
        rng.randrange(10**5, 10**6),
        rng.randrange(10**6, 10**7),
    )
    k = rng.randrange(60, 140)
    xs = [rng.randrange(12, 90) for _ in range(5)]
    fib_n, fib_m = rng.randrange(300, 900), rng.randrange(10**5, 10**6)
    lim = rng.randrange(5000, 20000)
    c = rng.randrange(10**7, 10**8)
    fib = [0, 1]
    while len(fib) <= fib_n:
        fib.append(fib[-1] + fib[-2])
    lcm = 1
    for x in xs:
        lcm = lcm * x // math.gcd(lcm, x)
    count = sum(1 for i in range(1, lim + 1) if (i % 3 == 0 or i % 7 == 0) and i % 5)
    return [
        Task("sum-squares", "oneshot", [f"What is the sum of the squares of the integers from {a} to {b} inclusive?"], str(sum(i * i for i in range(a, b + 1)))),
        Task("prime-count", "oneshot", [f"How many prime numbers are there below {n}?"], str(sum(1 for i in range(2, n) if all(i % p for p in range(2, math.isqrt(i) + 1))))),
        Task("pow-mod", "oneshot", [f"What is {base} to the power {exp}, modulo {mod}?"], str(pow(base, exp, mod))),
        Task("factorial-digits", "oneshot", [f"What is the sum of the decimal digits of {k}! ({k} factorial)?"], str(sum(map(int, str(math.factorial(k)))))),
        Task("lcm", "oneshot", [f"What is the least common multiple of {', '.join(map(str, xs))}?"], str(lcm)),
        Task("fib-mod", "oneshot", [f"With F(0)=0 and F(1)=1, what is the Fibonacci number F({fib_n}) modulo {fib_m}?"], str(fib[fib_n] % fib_m)),
        Task("divisible", "oneshot", [f"How many integers from 1 to {lim} are divisible by 3 or by 7 but not by 5?"], str(count)),
        Task("collatz", "oneshot", [f"Starting from {c}, how many steps does the Collatz process (n/2 if even, 3n+1 if odd) take to reach 1?"], str(collatz(c))),
    ]  # fmt: skip


def collatz(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


# -- text and dates --------------------------------------------------------------------


def text(rng: random.Random) -> list[Task]:
    d1, d2 = sorted([date(rng), date(rng)])
    d3, shift = date(rng), rng.randrange(100, 3000)
    year = rng.randrange(1950, 2090)
    s1, s2, s3 = sentence(rng, 14), sentence(rng, 18), sentence(rng, 12)
    letter = rng.choice("aeiort")
    token = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(14))
    fridays = sum(1 for m in range(1, 13) if dt.date(year, m, 13).weekday() == 4)
    words = s3.rstrip(".").lower().split()
    return [
        Task("weekday", "text", [f"What day of the week was {d3.isoformat()}?"], WEEKDAYS[d3.weekday()], "text"),
        Task("days-between", "text", [f"How many days are there from {d1.isoformat()} to {d2.isoformat()}?"], str((d2 - d1).days)),
        Task("date-shift", "text", [f"Which date is {shift} days after {d3.isoformat()}? Answer as YYYY-MM-DD."], (d3 + dt.timedelta(days=shift)).isoformat(), "text"),
        Task("friday-13", "text", [f"How many Friday the 13ths are there in the year {year}?"], str(fridays)),
        Task("letter-count", "text", [f"How many times does the letter '{letter}' occur in this sentence: \"{s1}\""], str(s1.lower().count(letter))),
        Task("word-count", "text", [f"How many words in this sentence have more than five letters: \"{s2}\""], str(sum(1 for w in s2.rstrip('.').split() if len(w) > 5))),
        Task("reverse", "text", [f"Write the string '{token}' backwards."], token[::-1], "text"),
        Task("sorted-words", "text", [f"Sort the words of this sentence alphabetically (lowercase) and give the third word: \"{s3}\""], sorted(words)[2], "text"),
    ]  # fmt: skip


# -- multi-step work on files -----------------------------------------------------------


def files(rng: random.Random) -> list[Task]:
    regions = ["north", "south", "east", "west"]
    sales = [
        [i + 1, rng.choice(regions), rng.randrange(100, 5000) / 100]
        for i in range(rng.randrange(60, 120))
    ]
    totals: dict[str, float] = collections.defaultdict(float)
    for _, region, amount in sales:
        totals[str(region)] += float(str(amount))
    pick = rng.choice(regions)
    people: list[dict[str, Any]] = [
        {
            "name": f"{rng.choice(WORDS)}-{i}",
            "age": rng.randrange(18, 80),
            "team": rng.choice(["red", "blue"]),
        }
        for i in range(rng.randrange(30, 60))
    ]
    levels = ["INFO"] * 6 + ["WARN"] * 2 + ["ERROR"]
    log = [
        f"2026-03-{rng.randrange(1, 29):02d} {rng.choice(levels)} {sentence(rng, 4)}"
        for _ in range(rng.randrange(150, 300))
    ]
    parts = {
        f"data/part{i}.csv": [[rng.randrange(1, 1000)] for _ in range(rng.randrange(10, 40))]
        for i in range(rng.randrange(3, 7))
    }
    config = {
        f"svc{i}": {"enabled": rng.random() < 0.5, "port": rng.randrange(1000, 9000)}
        for i in range(rng.randrange(15, 30))
    }
    corpus = " ".join(
        rng.choice(WORDS[: rng.randrange(8, 16)]) for _ in range(rng.randrange(400, 700))
    )
    users = [[u, f"{rng.choice(WORDS)}{u}"] for u in range(1, 21)]
    orders = [
        [o, rng.randrange(1, 21), rng.randrange(5, 500)] for o in range(1, rng.randrange(80, 150))
    ]
    who = rng.choice(users)
    counts = collections.Counter(corpus.split())
    return [
        Task("region-total", "files", [f"sales.csv lists sales (id, region, amount). What is the total amount for the region '{pick}'? Round to 2 decimals."], f"{totals[pick]:.2f}", "float", {"sales.csv": table(["id", "region", "amount"], sales)}),
        Task("top-region", "files", ["sales.csv lists sales (id, region, amount). Which region has the highest total amount?"], max(totals, key=lambda r: totals[r]), "text", {"sales.csv": table(["id", "region", "amount"], sales)}),
        Task("mean-age", "files", ["people.json holds a list of people. What is the average age of the people in team 'red'? Round to 2 decimals."], f"{sum(p['age'] for p in people if p['team'] == 'red') / max(1, sum(p['team'] == 'red' for p in people)):.2f}", "float", {"people.json": json.dumps(people, indent=1)}),
        Task("error-lines", "files", ["app.log is a log file. How many of its lines have the level ERROR?"], str(sum(" ERROR " in line for line in log)), "int", {"app.log": "\n".join(log) + "\n"}),
        Task("parts-sum", "files", ["The CSV files in the folder data/ each have one column 'value'. What is the sum of all values across all of them?"], str(sum(r[0] for rows in parts.values() for r in rows)), "int", {name: table(["value"], list(rows)) for name, rows in parts.items()}),
        Task("enabled-ports", "files", ["config.json maps service names to settings. What is the sum of the ports of the services that are enabled?"], str(sum(int(str(c["port"])) for c in config.values() if c["enabled"])), "int", {"config.json": json.dumps(config, indent=2)}),
        Task("top-word", "files", ["Which word occurs most often in words.txt?"], counts.most_common(1)[0][0], "text", {"words.txt": corpus}),
        Task("user-orders", "files", [f"users.csv has (id, name) and orders.csv has (id, user_id, amount). What is the total amount of the orders of the user named '{who[1]}'?"], str(sum(int(str(o[2])) for o in orders if o[1] == who[0])), "int", {"users.csv": table(["id", "name"], list(users)), "orders.csv": table(["id", "user_id", "amount"], list(orders))}),
    ]  # fmt: skip


# -- a follow-up turn in the same session ---------------------------------------------------


def followup(rng: random.Random) -> list[Task]:
    n = rng.randrange(40, 90)
    primes = [p for p in range(2, 2000) if all(p % q for q in range(2, math.isqrt(p) + 1))][:n]
    d, later = date(rng), rng.randrange(50, 400)
    a, b = rng.randrange(1000, 5000), rng.randrange(5000, 9000)
    mul, sub = rng.randrange(3, 13), rng.randrange(10, 99)
    notes = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(120, 250)))
    fib_n = rng.randrange(60, 120)
    fib = [0, 1]
    while len(fib) <= fib_n:
        fib.append(fib[-1] + fib[-2])
    rows = [
        [i, rng.choice(["paid", "open"]), rng.randrange(10, 900)]
        for i in range(1, rng.randrange(40, 90))
    ]
    scores = [
        {
            "player": f"p{i}",
            "team": rng.choice(["red", "blue", "green"]),
            "score": rng.randrange(0, 1000),
        }
        for i in range(rng.randrange(25, 50))
    ]
    s = sum(range(a, b + 1, 7))
    team = rng.choice(["red", "blue", "green"])
    m = rng.randrange(3, 9)
    return [
        Task("primes-list", "followup", [f"Make a list of the first {n} prime numbers in a variable p. How many of them end in the digit 3?", "What is the sum of the numbers in that list?"], str(sum(primes))),
        Task("weekday-later", "followup", [f"What day of the week is {d.isoformat()}?", f"And what day of the week is it {later} days after that date?"], WEEKDAYS[(d + dt.timedelta(days=later)).weekday()], "text"),
        Task("arith-chain", "followup", [f"Compute the sum of every 7th integer from {a} up to {b} (that is {a}, {a + 7}, ... not past {b}). Remember it.", f"Multiply that sum by {mul} and subtract {sub}. What is the result?"], str(s * mul - sub)),
        Task("notes-words", "followup", ["How many words does notes.txt contain?", "How many of those words are longer than 5 letters?"], str(sum(len(w) > 5 for w in notes.split())), "int", {"notes.txt": notes}),
        Task("fib-digits", "followup", [f"With F(0)=0 and F(1)=1, what is F({fib_n})?", "What is the sum of the decimal digits of that number?"], str(sum(map(int, str(fib[fib_n]))))),
        Task("paid-total", "followup", ["How many rows does orders.csv have (not counting the header)?", "What is the total amount of the rows whose status is 'paid'?"], str(sum(int(str(r[2])) for r in rows if r[1] == "paid")), "int", {"orders.csv": table(["id", "status", "amount"], list(rows))}),
        Task("team-max", "followup", ["scores.json is a list of players. How many players are there?", f"What is the highest score among the players of team '{team}'?"], str(max([int(str(x["score"])) for x in scores if x["team"] == team], default=0)), "int", {"scores.json": json.dumps(scores)}),
        Task("squares-filter", "followup", [f"Store the squares of 1 to 200 in a variable sq. How many of them are divisible by {m}?", f"What is the sum of the squares in sq that are NOT divisible by {m}?"], str(sum(i * i for i in range(1, 201) if (i * i) % m))),
    ]  # fmt: skip


BUILDERS: dict[str, Callable[[random.Random], list[Task]]] = {
    "oneshot": oneshot,
    "text": text,
    "files": files,
    "followup": followup,
}


def build(seed: int, groups: list[str] | None = None) -> list[Task]:
    """Every task of ``groups`` (all by default), deterministic for ``seed``."""
    tasks: list[Task] = []
    for group in groups or list(GROUPS):
        tasks.extend(BUILDERS[group](random.Random(f"{seed}:{group}")))
    return tasks
