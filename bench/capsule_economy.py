"""Capsule economy: tokens injected per turn by capsule recall vs prefix-loading all memory, as memory grows.

Run from the repository root (nothing is downloaded; the packaged all-MiniLM-L6-v2 is used offline)::

    python bench/capsule_economy.py --json bench/results/capsule_economy.json \\
        --out bench/results/capsule_economy.md
    python bench/capsule_economy.py --sizes 10,100 --queries 10        # quick check

For each memory size N (default 10, 100, 1,000, 3,000, 10,000 facts) and each of ``--queries`` probe questions, a
fresh store holds exactly N facts: the question's own *episode* (1-3 relevant facts plus 1-3 near-misses that
share its entities) and N - k facts of one shared *background* crew memory. The question is then asked the
three ways an agent can get memory into a model call, and what each injects is measured:

* ``memory_search`` tool (top_k=5, max_capsule_bytes=2048): the real ``MemorySearchTool`` bound to agent
  ``coder`` in group ``crew``; its result (a capsule) is what lands in the tool-result position.
* ``SharedMemory.update_context`` (top_k=5, max_capsule_bytes=1024): the real ``Memory`` view on an
  ``UnboundedChatCompletionContext`` whose last message is the question; the injected user message
  (preamble + capsule) is measured.
* AutoGen's ``ListMemory`` holding the same N facts: ``update_context`` on an ``UnboundedChatCompletionContext``
  injects every fact (``"1. ..."``, ``"2. ..."``) as one system message, on every turn.

Tokens are counted twice: with the MiniLM WordPiece tokenizer of the packaged model (an exact count for that
tokenizer, not for any chat model) and as UTF-8 bytes / 4 (the usual rough estimate for English text with
GPT-style BPE tokenizers). Recall is the fraction of a question's relevant facts whose id appears in the
capsule text (a line cut by the size limit keeps its id, so it counts; cut lines are reported separately).

The corpus (see ``FAMILIES``): ten families of crew-memory facts -- tool preferences of people, project
deadlines, team decisions, service ownership, customer accounts, repo conventions, incidents, leave and
cover, team meetings, data retention -- each with 2-4 phrasings per fact and random entities drawn from
word lists (2,000 person names, 40 services, 30 projects, 30 customers, 24 repos, 20 teams, ...). An episode
fixes a topic key (e.g. person + task, service + month) and writes 1-3 facts about it (the relevant facts)
and 1-3 near-misses that change one entity of the key (same person + other task, same service + other
month, ...). The question is phrased from the key, not copied from the facts. The background is the facts
(relevant and near-miss alike) of many other random episodes, minus any whose topic key equals a probe
question's key and minus exact duplicates; so at 10,000 facts a project or service name recurs in hundreds
of facts and a person name in a handful. Facts are spread over the three scopes the agent reads with
``scope="all"``: repo conventions in global (written by trusted code), half of the preferences in the agent's
own scope, everything else in the group scope, written by five crew agents; ~15 % have confidence < 1.

Every distinct text is embedded once by the REAL model (a cache sits in front of it, so the per-question
stores do not re-embed the background); questions are embedded by the real model at search time. Stores are
opened with ``near_duplicate_threshold=1.01`` (near-duplicate merging off): templated facts about different
entities can be close in embedding space and must stay distinct facts, as they would be in a real crew.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import re
import resource
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from autogen_core import CancellationToken
from autogen_core.memory import ListMemory, MemoryContent, MemoryMimeType
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import LLMMessage, UserMessage

from autogen_shared_memory import DedupSettings, RecallSettings
from autogen_shared_memory.embedding import SentenceTransformerEmbedder, Vectors
from autogen_shared_memory.integration.autogen.memory import SharedMemory
from autogen_shared_memory.integration.autogen.tools import MemorySearchTool, memory_tools
from autogen_shared_memory.integration.toolkit import DEFAULT_SCAFFOLDING, READ_ONLY_SCAFFOLDING
from autogen_shared_memory.store import SharedMemoryStore

AGENT, GROUP = "coder", "crew"
CREW = ("planner", "coder", "reviewer", "tester", "ops")
TOOL_BYTES, UPDATE_BYTES, TOP_K = 2048, 1024, 5
EXTRA_TOP_K = 10  # a second tool call shape: top_k=10 in the same 2048 bytes
# Fusion settings compared on the same stores (search top 5 only; the capsule keeps what the search returns when
# the byte budget does not bind). The main measurement uses the library's defaults as installed (recorded in the
# JSON); commit f41fa19 changed them from rrf_k=60 / weights 1:1 to rrf_k=5 / semantic_weight=0.5 (LoCoMo-tuned).
KNOB_VARIANTS: dict[str, dict[str, float]] = {
    "library defaults (as installed)": {},
    "rrf_k=60, lexical 1, semantic 1 (defaults before f41fa19)": {
        "rrf_k": 60.0,
        "lexical_weight": 1.0,
        "semantic_weight": 1.0,
    },
    "rrf_k=5, lexical 1, semantic 1": {"rrf_k": 5.0, "lexical_weight": 1.0, "semantic_weight": 1.0},
    "rrf_k=60, lexical 1, semantic 2": {"rrf_k": 60.0, "lexical_weight": 1.0, "semantic_weight": 2.0},
    "lexical leg only": {"lexical_weight": 1.0, "semantic_weight": 0.0},
    "semantic leg only": {"lexical_weight": 0.0, "semantic_weight": 1.0},
}
EXAMPLES = 3  # questions whose injected texts are kept in the JSON
CONTEXT_WINDOW = 128_000  # a common chat-model context window, for the "does it still fit" column


# ------------------------------------------------------------------------------------------ word lists
def _w(text: str) -> list[str]:
    return text.split()


FIRST = _w("""Priya Tom Ana Lukas Mei Omar Sara Diego Hana Ivan Lea Noah Yuki Amir Elena Felix Grace Hugo
Ines Jonas Kira Liam Maya Nils Olga Pablo Rosa Sami Tara Umar Vera Wen Xavier Yara Zoe Arjun Bea Carlos Dana
Emil Farah Gita Henrik Isla Jin Kofi Lina Marco Nadia Oscar""")
LAST = _w("""Novak Berg Silva Kim Okafor Rossi Tanaka Muller Haddad Larsen Costa Dubois Ivanova Park Sato
Nguyen Fischer Moreau Kowalski Santos Ahmed Jensen Lopez Weber Popescu Horvat Ali Meyer Garcia Nakamura Petrov
Russo Schmidt Yilmaz Eriksen Bianchi Kaur Mendes Novotny Lindqvist""")
TEAMS = _w("""payments billing platform search growth mobile data security infra support onboarding ledger
identity checkout analytics frontend backend compliance logistics pricing""")
TOOLS = _w("""Postgres Redis Kafka ClickHouse Terraform Airflow dbt Grafana Prometheus Sentry Datadog Snowflake
BigQuery Elasticsearch RabbitMQ Celery FastAPI Django DuckDB Spark Flink Pandas Polars Jupyter Metabase Looker
Tableau Notion Jira Linear""")
TASKS = [
    "billing reports",
    "log aggregation",
    "feature flags",
    "load testing",
    "schema migrations",
    "incident reviews",
    "fraud scoring",
    "invoice exports",
    "churn dashboards",
    "A/B test analysis",
    "secret rotation",
    "release notes",
    "data backfills",
    "cost allocation",
    "latency alerts",
    "customer exports",
    "tax calculations",
    "search ranking",
    "email campaigns",
    "access reviews",
    "capacity planning",
    "queue monitoring",
    "contract renewals",
    "GDPR deletions",
]
PROJECTS = _w("""Atlas Borealis Cobalt Dynamo Ember Falcon Glacier Helios Indigo Juniper Kestrel Lumen Meridian
Nebula Onyx Polaris Quartz Raven Sierra Tundra Umbra Vortex Willow Xenon Zephyr Aurora Basalt Cinder Drift Echo""")
MILESTONES = [
    "beta launch",
    "security review",
    "design freeze",
    "GA release",
    "load test",
    "data migration",
    "pilot with customers",
    "code freeze",
    "pricing page update",
    "SOC 2 evidence upload",
]
SERVICES = _w("""billing-api auth-gateway search-indexer payments-worker notification-hub ledger-sync
invoice-renderer fraud-scorer export-service user-profile checkout-web rate-limiter webhook-relay
report-builder geo-lookup media-resizer session-store audit-logger pricing-engine catalog-api
inventory-sync email-sender sms-gateway feature-flagger metrics-collector tax-service refund-processor
onboarding-flow chat-backend admin-portal data-exporter cache-warmer scheduler-core kyc-checker
shipping-quotes recommendation-api consent-manager backup-runner pdf-generator""")
CUSTOMERS = _w("""Acme Globex Initech Umbrella Hooli Vandelay Soylent Stark Wayne Tyrell Cyberdyne Wonka Oscorp
Aperture Gringotts Monarch Dunder Sterling Prestige Nakatomi Virtucon Oceanic Zorg Weyland Yoyodyne Massive
Pied-Piper Bluth Krusty Duff""")
REPOS = _w("""core-api web-app mobile-app data-pipelines infra-live ml-models billing-service docs-site
design-system cli-tools sdk-python sdk-js auth-service etl-jobs search-service admin-ui analytics-dbt
notifications terraform-modules load-tests partner-api ledger-core support-bot ops-scripts""")
RULES = [
    "use Pydantic v2 only, never v1 models",
    "every public function needs type hints",
    "never log personal data, not even in debug",
    "merge with squash commits only",
    "write tests with pytest, not unittest",
    "format with Black at line length 100",
    "pin every dependency in the lock file",
    "feature work goes behind a feature flag",
    "database migrations must be backwards compatible",
    "no direct pushes to main, two approvals needed",
    "use structured JSON logging",
    "secrets come from Vault, never from env files",
    "public endpoints need rate limits",
    "add a changelog entry for user-visible changes",
    "use UTC timestamps everywhere",
    "keep functions under 50 lines",
    "async code must not call blocking I/O",
    "every new table needs an owner column",
]
CI = ["GitHub Actions", "Jenkins", "GitLab CI", "Buildkite", "CircleCI"]
CAUSES = [
    "an expired TLS certificate",
    "a full disk on the primary database",
    "a bad feature-flag rollout",
    "a memory leak in the worker pool",
    "a DNS misconfiguration",
    "a runaway cron job",
    "a schema migration that locked the main table",
    "an upstream API changing its rate limits",
    "a retry storm after a deploy",
    "a misconfigured load balancer health check",
    "a connection pool exhausted by a slow query",
    "a clock skew between regions",
]
ACTIONS = [
    "added an alert on certificate expiry",
    "moved the cron jobs to a separate queue",
    "added a canary stage to every deploy",
    "capped retries with exponential backoff",
    "added disk usage alerts at 80 percent",
    "made migrations run in batches",
    "wrote a runbook for failing over the database",
    "added a load test to the release checklist",
    "pinned the client library version",
    "set timeouts on every outgoing call",
]
MONTHS = _w("January February March April May June July August September October November December")
WEEKDAYS = _w("Monday Tuesday Wednesday Thursday Friday")
CITIES = _w("Lisbon Berlin Nairobi Osaka Toronto Austin Warsaw Dublin Seoul Lagos Oslo Prague Madrid Zurich")
LEAVES = ["parental leave", "vacation", "sick leave", "a conference trip", "sabbatical", "jury duty"]
PLANS = ["Starter", "Team", "Business", "Enterprise", "Scale"]
CURRENCIES = ["EUR", "USD", "GBP", "JPY", "CHF"]
FEATURES = ["CSV import", "SSO login", "webhook retries", "bulk invoicing", "PDF export", "the admin dashboard"]
DATA_KINDS = [
    "payment events",
    "session logs",
    "support transcripts",
    "invoices",
    "user profiles",
    "audit events",
    "clickstream data",
    "email receipts",
]
DBS = ["Postgres", "S3", "ClickHouse", "BigQuery", "Elasticsearch", "Redis", "Snowflake"]
REASONS = [
    "it halves the monthly cost",
    "the old setup kept timing out",
    "the vendor is ending support",
    "it is what the rest of the company uses",
    "audits need a full history",
    "the on-call load was too high",
    "it cut query latency by a factor of three",
]
SLIP_REASONS = [
    "the vendor contract is late",
    "QA found blocking bugs",
    "two engineers left the team",
    "legal review took longer",
    "the customer asked for more time",
]
ADJECTIVES = ["slow", "fragile", "expensive", "noisy", "hard to debug"]
CHANNELS = ["team-updates", "eng-reports", "data-questions", "ops", "leads", "releases"]
PAGERS = ["PagerDuty", "Opsgenie", "a phone call", "the incident channel"]
CLOUDS = ["AWS eu-west-1", "AWS us-east-1", "GCP europe-west4", "Azure westeurope", "Hetzner fsn1"]


# ------------------------------------------------------------------------------------------ corpus
@dataclass(frozen=True)
class Fact:
    text: str
    key: tuple[str, ...]  # the topic key: (family, entities...); relevance is by key
    scope: str  # agent / group / global
    author: str | None  # None: trusted code
    confidence: float


@dataclass
class Episode:
    family: str
    key: tuple[str, ...]
    query: str
    relevant: list[Fact]
    near: list[Fact]


class Gen:
    """Random entities and fact construction for one generator state."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def person(self) -> str:
        return f"{self.r.choice(FIRST)} {self.r.choice(LAST)}"

    def other(self, pool: Sequence[str], *avoid: str) -> str:
        while True:
            x = self.r.choice(pool)
            if x not in avoid:
                return x

    def other_person(self, *avoid: str) -> str:
        while True:
            p = self.person()
            if p not in avoid:
                return p

    def date(self) -> str:
        month, day = self.r.randrange(12), self.r.randint(1, 28)
        if self.r.random() < 0.5:
            return f"{MONTHS[month]} {day}"
        return f"2026-{month + 1:02d}-{day:02d}"

    def pick(self, templates: Sequence[str], **slots: str) -> str:
        return self.r.choice(templates).format(**slots)

    def ask(self, n: int, by_n: dict[int, list[str]], **slots: str) -> str:
        """A question that asks for exactly what the episode's ``n`` relevant facts say."""
        return self.pick(by_n[n], **slots)

    def fact(self, text: str, key: tuple[str, ...], scope: str = "group") -> Fact:
        author = None if scope == "global" else AGENT if scope == "agent" else self.r.choice(CREW)
        conf = self.r.choice([0.6, 0.7, 0.8, 0.9]) if self.r.random() < 0.15 else 1.0
        return Fact(text, key, scope, author, conf)

    def n_relevant(self, most: int) -> int:
        return self.r.choice([n for n in (1, 2, 2, 3) if n <= most])


def _pref(g: Gen) -> Episode:
    p, task = g.person(), g.r.choice(TASKS)
    tool = g.r.choice(TOOLS)
    key = ("pref", p, task)
    scope = "agent" if g.r.random() < 0.5 else "group"
    facts = [
        g.pick(
            [
                "{p} prefers {tool} for {task}.",
                "For {task}, {p} wants us to use {tool}.",
                "{p} asked that {task} always be done with {tool}.",
            ],
            p=p,
            tool=tool,
            task=task,
        ),
        f"{p} finds {g.other(TOOLS, tool)} too {g.r.choice(ADJECTIVES)} for {task} and avoids it.",
        f"{p} wants the results of {task} posted in #{g.r.choice(CHANNELS)}.",
    ]
    n = g.n_relevant(3)
    p2, task2 = g.other_person(p), g.other(TASKS, task)
    near = [
        g.fact(f"{p} prefers {g.r.choice(TOOLS)} for {task2}.", ("pref", p, task2), scope),
        g.fact(f"For {task}, {p2} wants us to use {g.other(TOOLS, tool)}.", ("pref", p2, task), scope),
        g.fact(f"{p} wants the results of {task2} posted in #{g.r.choice(CHANNELS)}.", ("pref", p, task2), scope),
    ]
    general = [
        "{p} will review our {task} work; what are their preferences for it?",
        "What does {p} want when we do {task}?",
    ]
    query = g.ask(n, {1: ["Which tool does {p} want us to use for {task}?"], 2: general, 3: general}, p=p, task=task)
    return Episode("preference", key, query, [g.fact(t, key, scope) for t in facts[:n]], near[: g.r.randint(1, 3)])


def _deadline(g: Gen) -> Episode:
    proj, ms = g.r.choice(PROJECTS), g.r.choice(MILESTONES)
    key = ("deadline", proj, ms)
    date = g.date()
    facts = [
        g.pick(
            [
                "The {ms} for {proj} is due on {date}.",
                "{proj} must be ready for its {ms} by {date}.",
                "Deadline for the {proj} {ms}: {date}.",
            ],
            ms=ms,
            proj=proj,
            date=date,
        ),
        f"The {proj} {ms} moved from {g.date()} to {date} because {g.r.choice(SLIP_REASONS)}.",
        f"{g.person()} has to sign off the {ms} of {proj}.",
    ]
    n = g.n_relevant(3)
    ms2, proj2 = g.other(MILESTONES, ms), g.other(PROJECTS, proj)
    near = [
        g.fact(f"The {ms2} for {proj} is due on {g.date()}.", ("deadline", proj, ms2)),
        g.fact(f"The {ms} for {proj2} is due on {g.date()}.", ("deadline", proj2, ms)),
        g.fact(f"{g.person()} has to sign off the {ms2} of {proj}.", ("deadline", proj, ms2)),
    ]
    query = g.ask(
        n,
        {
            1: ["When is the {ms} of {proj} due?", "What is the date of the {proj} {ms}?"],
            2: ["What is the deadline for the {proj} {ms}, and has it moved?", "Did the {ms} date for {proj} change?"],
            3: ["When is the {proj} {ms} due now, why did it move, and who approves it?"],
        },
        ms=ms,
        proj=proj,
    )
    return Episode("deadline", key, query, [g.fact(t, key) for t in facts[:n]], near[: g.r.randint(1, 3)])


def _decision(g: Gen) -> Episode:
    team, task = g.r.choice(TEAMS), g.r.choice(TASKS)
    old = g.r.choice(TOOLS)
    new = g.other(TOOLS, old)
    key = ("decision", team, task)
    facts = [
        g.pick(
            [
                "The {team} team decided to move {task} from {old} to {new}.",
                "Decision of the {team} team: {task} will run on {new} instead of {old}.",
            ],
            team=team,
            task=task,
            old=old,
            new=new,
        ),
        f"The {team} team picked {new} over {old} for {task} because {g.r.choice(REASONS)}.",
        f"{g.person()} leads the move of {task} to {new} for the {team} team, target {g.r.choice(MONTHS)}.",
    ]
    n = g.n_relevant(3)
    team2, task2 = g.other(TEAMS, team), g.other(TASKS, task)
    near = [
        g.fact(f"The {team2} team decided to keep {task} on {old}.", ("decision", team2, task)),
        g.fact(
            f"The {team} team decided to move {task2} from {g.r.choice(TOOLS)} to {g.r.choice(TOOLS)}.",
            ("decision", team, task2),
        ),
        g.fact(f"The {team2} team picked {new} for {task} last year.", ("decision", team2, task)),
    ]
    query = g.ask(
        n,
        {
            1: ["What did the {team} team decide about {task}?"],
            2: [
                "Why is the {team} team changing the tooling for {task}?",
                "What did {team} decide for {task}, and why?",
            ],
            3: ["What is the plan of the {team} team for {task}, why, and who leads it?"],
        },
        team=team,
        task=task,
    )
    return Episode("decision", key, query, [g.fact(t, key) for t in facts[:n]], near[: g.r.randint(1, 3)])


def _owner(g: Gen) -> Episode:
    svc = g.r.choice(SERVICES)
    key = ("owner", svc)
    p = g.person()
    facts = [
        g.pick(
            ["{p} owns the {svc} service.", "{svc} is owned by {p} on the {team} team."],
            p=p,
            svc=svc,
            team=g.r.choice(TEAMS),
        ),
        f"{g.other_person(p)} is the backup on-call for {svc}.",
        f"Page {p} about {svc} through {g.r.choice(PAGERS)}, not by direct message.",
    ]
    n = g.n_relevant(3)
    svc2 = g.other(SERVICES, svc)
    near = [
        g.fact(f"{g.person()} owns the {svc2} service.", ("owner", svc2)),
        g.fact(f"{svc} runs in {g.r.choice(CLOUDS)} with {g.r.randint(2, 12)} replicas.", ("deploy", svc)),
        g.fact(f"{p} reviews all schema changes to {svc2}.", ("owner", svc2)),
    ]
    general = ["Who should I contact when {svc} breaks?", "Who is responsible for {svc} and how do I reach them?"]
    query = g.ask(n, {1: ["Who owns {svc}?", *general], 2: general, 3: general}, svc=svc)
    return Episode("ownership", key, query, [g.fact(t, key) for t in facts[:n]], near[: g.r.randint(1, 3)])


def _customer(g: Gen) -> Episode:
    cust = g.r.choice(CUSTOMERS)
    key = ("customer", cust)
    facts = [
        g.pick(
            ["{c} renews its {plan} contract on {date}.", "The {plan} contract of {c} is up for renewal on {date}."],
            c=cust,
            plan=g.r.choice(PLANS),
            date=g.date(),
        ),
        f"{cust} wants invoices in {g.r.choice(CURRENCIES)}, addressed to {g.person()}.",
        f"The account manager for {cust} is {g.person()}.",
    ]
    n = g.n_relevant(3)
    cust2 = g.other(CUSTOMERS, cust)
    feat = g.r.choice(FEATURES)
    near = [
        g.fact(f"{cust2} renews its {g.r.choice(PLANS)} contract on {g.date()}.", ("customer", cust2)),
        g.fact(f"{cust} reported that {feat} is slow for large accounts.", ("issue", cust, feat)),
        g.fact(f"The account manager for {cust2} is {g.person()}.", ("customer", cust2)),
    ]
    general = ["What should I know about the {c} account before the renewal call?", "Summarise the {c} account."]
    query = g.ask(n, {1: ["When does {c} renew?", "When is the {c} contract up?"], 2: general, 3: general}, c=cust)
    return Episode("customer", key, query, [g.fact(t, key) for t in facts[:n]], near[: g.r.randint(1, 3)])


def _convention(g: Gen) -> Episode:
    repo = g.r.choice(REPOS)
    key = ("convention", repo)
    rules = g.r.sample(RULES, 3)
    tmpl = ["In the {repo} repo, {rule}.", "Convention for {repo}: {rule}.", "{repo} rule: {rule}."]
    n = g.n_relevant(3)
    repo2 = g.other(REPOS, repo)
    near = [
        g.fact(g.pick(tmpl, repo=repo2, rule=g.r.choice(RULES)), ("convention", repo2), "global"),
        g.fact(f"The CI of the {repo} repo runs on {g.r.choice(CI)}.", ("ci", repo), "global"),
        g.fact(g.pick(tmpl, repo=repo2, rule=g.r.choice(RULES)), ("convention", repo2), "global"),
    ]
    query = g.pick(
        [
            "What coding conventions apply in the {repo} repo?",
            "Before I open a pull request against {repo}, which rules must I follow?",
            "What are the house rules for code in {repo}?",
        ],
        repo=repo,
    )
    relevant = [g.fact(g.pick(tmpl, repo=repo, rule=rule), key, "global") for rule in rules[:n]]
    return Episode("convention", key, query, relevant, near[: g.r.randint(1, 3)])


def _incident(g: Gen) -> Episode:
    svc, month = g.r.choice(SERVICES), g.r.choice(MONTHS)
    key = ("incident", svc, month)
    facts = [
        g.pick(
            [
                "The {month} outage of {svc} was caused by {cause}.",
                "Root cause of the {svc} outage in {month}: {cause}.",
            ],
            month=month,
            svc=svc,
            cause=g.r.choice(CAUSES),
        ),
        f"After the {month} {svc} outage we {g.r.choice(ACTIONS)}.",
    ]
    n = g.n_relevant(2)
    month2, svc2 = g.other(MONTHS, month), g.other(SERVICES, svc)
    near = [
        g.fact(f"The {month2} outage of {svc} was caused by {g.r.choice(CAUSES)}.", ("incident", svc, month2)),
        g.fact(f"The {month} outage of {svc2} was caused by {g.r.choice(CAUSES)}.", ("incident", svc2, month)),
        g.fact(f"After the {month2} {svc} outage we {g.r.choice(ACTIONS)}.", ("incident", svc, month2)),
    ]
    query = g.ask(
        n,
        {
            1: ["What caused the {svc} outage in {month}?"],
            2: [
                "What went wrong with {svc} in {month}, and what did we change afterwards?",
                "Postmortem summary for the {month} incident on {svc}?",
            ],
        },
        svc=svc,
        month=month,
    )
    return Episode("incident", key, query, [g.fact(t, key) for t in facts[:n]], near[: g.r.randint(1, 3)])


def _leave(g: Gen) -> Episode:
    p = g.person()
    key = ("leave", p)
    q = g.other_person(p)
    facts = [
        g.pick(
            ["{p} is on {leave} until {date}.", "{p} is away ({leave}) until {date}."],
            p=p,
            leave=g.r.choice(LEAVES),
            date=g.date(),
        ),
        f"While {p} is away, {q} covers their code reviews.",
    ]
    n = g.n_relevant(2)
    p2, p3 = g.other_person(p), g.other_person(p, q)
    near = [
        g.fact(f"{p2} is on {g.r.choice(LEAVES)} until {g.date()}.", ("leave", p2)),
        g.fact(f"{q} covers the on-call shifts of {p3} in {g.r.choice(MONTHS)}.", ("leave", p3)),
        g.fact(f"{p} moved to the {g.r.choice(TEAMS)} team last quarter.", ("team-of", p)),
    ]
    query = g.ask(
        n,
        {
            1: ["Until when is {p} away?", "When is {p} back?"],
            2: ["Who covers for {p} while they are out, and until when?", "Is {p} available, and who covers for them?"],
        },
        p=p,
    )
    return Episode("leave", key, query, [g.fact(t, key) for t in facts[:n]], near[: g.r.randint(1, 3)])


def _meeting(g: Gen) -> Episode:
    team = g.r.choice(TEAMS)
    key = ("meeting", team)
    facts = [
        f"The {team} team's standup is at {g.r.randint(8, 11)}:{g.r.choice(['00', '15', '30', '45'])} "
        f"{g.r.choice(CITIES)} time.",
        f"The {team} team holds its retro every other {g.r.choice(WEEKDAYS)}.",
    ]
    n = g.n_relevant(2)
    team2 = g.other(TEAMS, team)
    near = [
        g.fact(
            f"The {team2} team's standup is at {g.r.randint(8, 11)}:30 {g.r.choice(CITIES)} time.", ("meeting", team2)
        ),
        g.fact(f"The {team} team's on-call rotation changes every {g.r.choice(WEEKDAYS)}.", ("rotation", team)),
        g.fact(f"The {team2} team holds its retro every other {g.r.choice(WEEKDAYS)}.", ("meeting", team2)),
    ]
    query = g.ask(
        n,
        {
            1: ["What time is the {team} standup?"],
            2: ["When does the {team} team meet?", "What time is the {team} standup, and when is their retro?"],
        },
        team=team,
    )
    return Episode("meeting", key, query, [g.fact(t, key) for t in facts[:n]], near[: g.r.randint(1, 3)])


def _retention(g: Gen) -> Episode:
    svc, data = g.r.choice(SERVICES), g.r.choice(DATA_KINDS)
    key = ("retention", svc, data)
    facts = [
        g.pick(
            ["{svc} keeps {data} in {db} for {n} days.", "Retention of {data} in {svc}: {n} days, stored in {db}."],
            svc=svc,
            data=data,
            db=g.r.choice(DBS),
            n=str(g.r.choice([7, 14, 30, 90, 180, 365])),
        ),
        f"{data.capitalize()} from {svc} are deleted within {g.r.choice([3, 7, 30])} days of a GDPR request.",
    ]
    n = g.n_relevant(2)
    svc2, data2 = g.other(SERVICES, svc), g.other(DATA_KINDS, data)
    near = [
        g.fact(
            f"{svc} keeps {data2} in {g.r.choice(DBS)} for {g.r.choice([7, 30, 90])} days.", ("retention", svc, data2)
        ),
        g.fact(
            f"{svc2} keeps {data} in {g.r.choice(DBS)} for {g.r.choice([30, 365])} days.", ("retention", svc2, data)
        ),
    ]
    query = g.ask(
        n,
        {
            1: ["How long do we keep {data} from {svc}?", "What is the retention period for {data} in {svc}?"],
            2: ["What is the retention and deletion policy for {data} in {svc}?"],
        },
        svc=svc,
        data=data,
    )
    return Episode("retention", key, query, [g.fact(t, key) for t in facts[:n]], near[: g.r.randint(1, 2)])


FAMILIES: dict[str, Callable[[Gen], Episode]] = {
    "preference": _pref,
    "deadline": _deadline,
    "decision": _decision,
    "ownership": _owner,
    "customer": _customer,
    "convention": _convention,
    "incident": _incident,
    "leave": _leave,
    "meeting": _meeting,
    "retention": _retention,
}


@dataclass
class Corpus:
    probes: list[Episode]
    background: list[Fact]


def make_corpus(n_queries: int, n_background: int, seed: int) -> Corpus:
    """``n_queries`` probe episodes (families in turn, distinct keys) and a background of other episodes' facts."""
    g = Gen(random.Random(seed))
    names = list(FAMILIES)
    probes: list[Episode] = []
    keys: set[tuple[str, ...]] = set()
    texts: set[str] = set()
    while len(probes) < n_queries:
        ep = FAMILIES[names[len(probes) % len(names)]](g)
        own = [f.text for f in ep.relevant + ep.near]
        # each probe gets its own store, so probes need distinct topics but may share entities
        if ep.key in keys or len(set(own)) != len(own) or any(f.key == ep.key for f in ep.near):
            continue
        probes.append(ep)
        keys.add(ep.key)
        texts.update(own)
    background: list[Fact] = []
    while len(background) < n_background:
        ep = FAMILIES[g.r.choice(names)](g)
        for f in ep.relevant + ep.near:
            if f.key not in keys and f.text not in texts and len(background) < n_background:
                background.append(f)
                texts.add(f.text)
    return Corpus(probes, background)


# ------------------------------------------------------------------------------------------ measuring
class CachedEmbedder(SentenceTransformerEmbedder):
    """The real model behind a text -> vector cache: each distinct text is embedded once per run.

    A subclass of the library's embedder so that it is an AutoGen component (``SharedMemory`` dumps its store).
    """

    def __init__(self) -> None:
        super().__init__(cache_size=0)
        self.vectors: dict[str, np.ndarray] = {}
        self.embedded = 0
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> Vectors:
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if missing:
            started = time.perf_counter()
            vectors = super().embed(missing)
            self.seconds += time.perf_counter() - started
            self.embedded += len(missing)
            self.vectors.update(zip(missing, vectors, strict=True))
        return np.ascontiguousarray(np.stack([self.vectors[t] for t in texts]), dtype=np.float32)


class Counter:
    """Token counts: the packaged MiniLM WordPiece tokenizer, and UTF-8 bytes / 4."""

    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()  # "sequence longer than 512" is expected: we only count
        self.tok = AutoTokenizer.from_pretrained(str(model_dir))

    def count(self, text: str) -> dict[str, float]:
        data = len(text.encode("utf-8"))
        ids = self.tok(text, add_special_tokens=False, truncation=False)["input_ids"]
        return {"bytes": data, "minilm_tokens": len(ids), "bytes_div_4": data / 4}


_ID_RE = re.compile(r"\[([agw]_[0-9a-f]{20}) \|")
_HEADER_RE = re.compile(r"^\[memory: (\d+) of (\d+) facts")


def capsule_ids(text: str) -> list[str]:
    return _ID_RE.findall(text)


def capsule_contents(text: str) -> str:
    """The fact texts of a capsule, one per line, without the header and the ``[id | scope | ...]`` prefix."""
    return "\n".join(re.sub(r"^- \[[^\]]*\] ", "", ln) for ln in text.splitlines() if ln.startswith("- ["))


def _last_text(messages: Sequence[LLMMessage]) -> str:
    content = messages[-1].content
    return content if isinstance(content, str) else json.dumps(content, default=str)


@dataclass
class Row:
    """One probe question at one memory size."""

    size: int
    query: int
    family: str
    n_relevant: int
    n_near: int
    search_recall: float  # relevant ids among the top_k=5 hits
    tool: dict[str, float]
    tool_recall: float
    tool_shown: int
    tool_cut: int  # relevant facts present only as a line cut by the size limit
    tool_content: dict[str, float]  # the same capsule's fact texts alone (no header, ids, provenance)
    update: dict[str, float]
    update_recall: float
    update_shown: int
    update_cut: int
    tool10: dict[str, float]
    tool10_recall: float
    tool10_shown: int
    listmemory: dict[str, float]
    knob_recall: dict[str, float]  # search top 5 recall under each KNOB_VARIANTS setting
    composition: dict[str, int] = field(default_factory=dict)  # what the 2048-byte capsule's lines are
    texts: dict[str, str] = field(default_factory=dict)  # the injected texts, kept for the first few questions


def _recall(ids: Sequence[str], relevant: set[str]) -> float:
    return len(relevant & set(ids)) / len(relevant)


def _cut_relevant(text: str, relevant: set[str]) -> int:
    return sum(1 for line in text.splitlines() if line.endswith("…") and any(r in line for r in relevant))


def _shown(text: str) -> int:
    """Facts the capsule shows, from its header (the update_context message starts with a preamble line)."""
    header = next((ln for ln in text.splitlines() if ln.startswith("[memory:")), "")
    m = _HEADER_RE.match(header)
    return int(m.group(1)) if m else 0


def populate(store: SharedMemoryStore, facts: Sequence[Fact]) -> dict[str, str]:
    """Write ``facts`` (grouped by scope and author, input order kept within a group); text -> fact id."""
    groups: dict[tuple[str, str | None], list[Fact]] = {}
    for f in facts:
        groups.setdefault((f.scope, f.author), []).append(f)
    ids: dict[str, str] = {}
    for (scope, author), items in groups.items():
        receipts = store.as_agent(author, GROUP).remember_many(
            [{"content": f.text, "confidence": f.confidence} for f in items], scope
        )
        for f, r in zip(items, receipts, strict=True):
            if r.status != "created":
                raise RuntimeError(f"fact was not created ({r.status}): {f.text!r}")
            ids[f.text] = r.id
    return ids


async def measure_one(
    root: Path,
    embedder: CachedEmbedder,
    counter: Counter,
    size: int,
    qi: int,
    ep: Episode,
    background: list[Fact],
    layout: str = "crew",
) -> Row:
    own = ep.relevant + ep.near
    rng = random.Random(f"{size}:{qi}")
    facts = own + background[: size - len(own)]
    rng.shuffle(facts)  # the episode lands at random places in the crew's history
    if layout == "single":  # diagnostic: the same facts, all in the group scope (authors unchanged)
        facts = [replace(f, scope="group") for f in facts]  # relevance is looked up by text, so ep stays valid
    store = SharedMemoryStore(root, embedder=embedder, dedup=DedupSettings(near_duplicate=1.01))
    try:
        for agent in CREW:
            store.operator.add_member(GROUP, agent)
        ids = populate(store, facts)
        relevant = {ids[f.text] for f in ep.relevant}
        near = {ids[f.text] for f in ep.near}
        hits = await store.as_agent(AGENT, GROUP).asearch(ep.query, "all", top_k=TOP_K)
        tool = next(t for t in memory_tools(store, AGENT, GROUP) if isinstance(t, MemorySearchTool))
        token = CancellationToken()
        tool_text = str(
            await tool.run_json({"query": ep.query, "top_k": TOP_K, "max_capsule_bytes": TOOL_BYTES}, token)
        )
        tool10_text = str(
            await tool.run_json({"query": ep.query, "top_k": EXTRA_TOP_K, "max_capsule_bytes": TOOL_BYTES}, token)
        )
        memory = SharedMemory(store, AGENT, GROUP, top_k=TOP_K, max_capsule_bytes=UPDATE_BYTES)
        ctx = UnboundedChatCompletionContext([UserMessage(content=ep.query, source="user")])
        await memory.update_context(ctx)
        msgs = await ctx.get_messages()
        update_text = _last_text(msgs) if len(msgs) > 1 else ""
        lm = ListMemory()
        for f in facts:
            await lm.add(MemoryContent(content=f.text, mime_type=MemoryMimeType.TEXT))
        lctx = UnboundedChatCompletionContext([UserMessage(content=ep.query, source="user")])
        await lm.update_context(lctx)
        list_text = _last_text(await lctx.get_messages())
        knob_recall = {}
        for name, knobs in KNOB_VARIANTS.items():  # same backend object, other fusion settings
            variant = SharedMemoryStore(store.backend, embedder=embedder, recall=RecallSettings(**knobs))
            found = variant.as_agent(AGENT, GROUP).search(ep.query, "all", top_k=TOP_K)
            knob_recall[name] = _recall([h.fact.id for h in found], relevant)
        shown_ids = capsule_ids(tool_text)
        composition = {
            "relevant": sum(1 for i in shown_ids if i in relevant),
            "near_miss": sum(1 for i in shown_ids if i in near),
            "background": sum(1 for i in shown_ids if i not in relevant and i not in near),
        }
        return Row(
            size=size,
            query=qi,
            family=ep.family,
            n_relevant=len(relevant),
            n_near=len(near),
            search_recall=_recall([h.fact.id for h in hits], relevant),
            tool=counter.count(tool_text),
            tool_recall=_recall(shown_ids, relevant),
            tool_shown=_shown(tool_text),
            tool_cut=_cut_relevant(tool_text, relevant),
            tool_content=counter.count(capsule_contents(tool_text)),
            update=counter.count(update_text),
            update_recall=_recall(capsule_ids(update_text), relevant),
            update_shown=_shown(update_text),
            update_cut=_cut_relevant(update_text, relevant),
            tool10=counter.count(tool10_text),
            tool10_recall=_recall(capsule_ids(tool10_text), relevant),
            tool10_shown=_shown(tool10_text),
            listmemory=counter.count(list_text),
            knob_recall=knob_recall,
            composition=composition,
            texts={"query": ep.query, "tool_2048": tool_text, "update_1024": update_text, "listmemory": list_text[:600]}
            if qi < EXAMPLES
            else {},
        )
    finally:
        store.close()


def _mean(xs: Sequence[float]) -> float:
    return float(statistics.fmean(xs)) if xs else float("nan")


def bootstrap_ci(values: Sequence[float], n: int = 2000, seed: int = 11) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean over questions."""
    if not values:
        return (float("nan"), float("nan"))
    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, len(arr), size=(n, len(arr)))].mean(axis=1)
    return (float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5)))


def summarise(rows: Sequence[Row], size: int) -> dict[str, Any]:
    rs = [r for r in rows if r.size == size]

    def tok(attr: str) -> dict[str, float]:
        vals = [getattr(r, attr) for r in rs]
        return {
            "bytes_mean": _mean([v["bytes"] for v in vals]),
            "bytes_max": max(v["bytes"] for v in vals),
            "minilm_tokens_mean": _mean([v["minilm_tokens"] for v in vals]),
            "minilm_tokens_max": max(v["minilm_tokens"] for v in vals),
            "bytes_div_4_mean": _mean([v["bytes_div_4"] for v in vals]),
        }

    families = sorted({r.family for r in rs})
    return {
        "size": size,
        "queries": len(rs),
        "relevant_facts": sum(r.n_relevant for r in rs),
        "tokens": {
            "tool_2048": tok("tool"),
            "tool_2048_fact_text_only": tok("tool_content"),
            "update_1024": tok("update"),
            "tool_top10_2048": tok("tool10"),
            "listmemory": tok("listmemory"),
        },
        "recall": {
            "search_top5": _mean([r.search_recall for r in rs]),
            "tool_2048": _mean([r.tool_recall for r in rs]),
            "update_1024": _mean([r.update_recall for r in rs]),
            "tool_top10_2048": _mean([r.tool10_recall for r in rs]),
        },
        "recall_ci95": {
            "tool_2048": bootstrap_ci([r.tool_recall for r in rs]),
            "update_1024": bootstrap_ci([r.update_recall for r in rs]),
        },
        "search_top5_recall_by_fusion": {k: _mean([r.knob_recall[k] for r in rs]) for k in KNOB_VARIANTS},
        "all_relevant_in_capsule": {
            "tool_2048": _mean([1.0 if r.tool_recall == 1.0 else 0.0 for r in rs]),
            "update_1024": _mean([1.0 if r.update_recall == 1.0 else 0.0 for r in rs]),
        },
        "none_relevant_in_capsule": {
            "tool_2048": _mean([1.0 if r.tool_recall == 0.0 else 0.0 for r in rs]),
            "update_1024": _mean([1.0 if r.update_recall == 0.0 else 0.0 for r in rs]),
        },
        "facts_shown_mean": {
            "tool_2048": _mean([r.tool_shown for r in rs]),
            "update_1024": _mean([r.update_shown for r in rs]),
            "tool_top10_2048": _mean([r.tool10_shown for r in rs]),
        },
        "relevant_cut_lines": {"tool_2048": sum(r.tool_cut for r in rs), "update_1024": sum(r.update_cut for r in rs)},
        "capsule_2048_lines": {k: sum(r.composition[k] for r in rs) for k in ("relevant", "near_miss", "background")},
        "recall_by_family": {
            fam: {
                "tool_2048": _mean([r.tool_recall for r in rs if r.family == fam]),
                "update_1024": _mean([r.update_recall for r in rs if r.family == fam]),
            }
            for fam in families
        },
    }


def machine() -> dict[str, Any]:
    import sentence_transformers
    import torch

    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import autogen_core

        autogen = getattr(autogen_core, "__version__", "?")
    except ImportError:  # pragma: no cover
        autogen = "?"
    if autogen == "?":
        from importlib.metadata import version

        autogen = version("autogen-core")
    return {
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "ram_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "sentence_transformers": sentence_transformers.__version__,
        "autogen_core": autogen,
        "kernel": platform.release(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def library_info(store: SharedMemoryStore) -> dict[str, Any]:
    """The recall settings the store runs with by default, and which library code measured them."""
    import subprocess

    info: dict[str, Any] = {
        "rrf_k": store.recall.rrf_k,
        "lexical_weight": store.lexical_weight,
        "semantic_weight": store.semantic_weight,
        "search_depth": store.search_depth,
        "min_similarity": store.min_similarity,
        "context_weights": getattr(store, "context_weights", None),
    }
    try:
        repo = Path(__file__).resolve().parent.parent
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=repo, capture_output=True, text=True)
        info["git"] = head.stdout.strip() + (" + uncommitted changes in src/" if dirty.stdout.strip() else "")
    except OSError:
        info["git"] = "?"
    return info


def fixed_overheads(counter: Counter, store: SharedMemoryStore) -> dict[str, dict[str, float]]:
    """Per-turn text that is NOT memory but comes with each path: tool schemas and prompt scaffolding."""
    schemas = json.dumps([dict(t.schema) for t in memory_tools(store, AGENT, GROUP)], ensure_ascii=False)
    return {
        "tool_schemas_json": counter.count(schemas),
        "default_scaffolding": counter.count(DEFAULT_SCAFFOLDING),
        "read_only_scaffolding": counter.count(READ_ONLY_SCAFFOLDING),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    meta = machine()  # load average at the start
    corpus = make_corpus(args.queries, max(args.sizes), args.seed)
    embedder = CachedEmbedder()
    counter = Counter(embedder.model_dir)
    texts = [f.text for f in corpus.background] + [f.text for ep in corpus.probes for f in ep.relevant + ep.near]
    t0 = time.perf_counter()
    embedder.embed(texts)  # every fact text once, in one batch call, with the real model
    prefill_s = time.perf_counter() - t0
    print(f"embedded {len(texts):,} fact texts in {prefill_s:.1f} s", file=sys.stderr)
    rows: list[Row] = []
    size_seconds: dict[int, float] = {}
    root = Path(tempfile.mkdtemp(prefix="capsule-economy-"))
    try:
        overheads_store = SharedMemoryStore(root / "schemas", embedder=embedder)
        overheads = fixed_overheads(counter, overheads_store)
        library = library_info(overheads_store)
        overheads_store.close()
        for size in args.sizes:
            t = time.perf_counter()
            size_seconds[size] = 0.0
            for qi, ep in enumerate(corpus.probes):
                if len(ep.relevant) + len(ep.near) > size:
                    raise SystemExit(f"size {size} is smaller than an episode ({len(ep.relevant) + len(ep.near)})")
                sub = root / f"n{size}-q{qi}"
                rows.append(await measure_one(sub, embedder, counter, size, qi, ep, corpus.background, args.layout))
                shutil.rmtree(sub, ignore_errors=True)
            size_seconds[size] = round(time.perf_counter() - t, 1)
            s = summarise(rows, size)
            print(
                f"size {size:>6,}: tool capsule {s['tokens']['tool_2048']['minilm_tokens_mean']:.0f} tok, "
                f"ListMemory {s['tokens']['listmemory']['minilm_tokens_mean']:.0f} tok, recall tool "
                f"{s['recall']['tool_2048']:.3f} update {s['recall']['update_1024']:.3f} "
                f"({time.perf_counter() - t:.1f} s)",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    argv = args.argv
    meta["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return {
        "command": "python " + " ".join(shlex.quote(a) for a in ["bench/capsule_economy.py", *argv]),
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": meta,
        "library": library,
        "setup": {
            "sizes": args.sizes,
            "queries": args.queries,
            "seed": args.seed,
            "agent": AGENT,
            "group": GROUP,
            "crew": list(CREW),
            "tool": {"top_k": TOP_K, "max_capsule_bytes": TOOL_BYTES},
            "tool_extra": {"top_k": EXTRA_TOP_K, "max_capsule_bytes": TOOL_BYTES},
            "update_context": {"top_k": TOP_K, "max_capsule_bytes": UPDATE_BYTES},
            "near_duplicate_threshold": 1.01,
            "layout": args.layout,
            "context_window_for_fit": CONTEXT_WINDOW,
            "families": list(FAMILIES),
            "background_scopes": {
                s: sum(1 for f in corpus.background if f.scope == s) for s in ("agent", "group", "global")
            },
        },
        "probes": [
            {
                "family": ep.family,
                "query": ep.query,
                "relevant": [f.text for f in ep.relevant],
                "near_miss": [f.text for f in ep.near],
            }
            for ep in corpus.probes
        ],
        "background_sample": [f.text for f in corpus.background[:12]],
        "fixed_overheads": overheads,
        "summary": [summarise(rows, size) for size in args.sizes],
        "rows": [asdict(r) for r in rows],
        "embedding": {
            "texts": embedder.embedded,
            "seconds": round(embedder.seconds, 1),
            "prefill_s": round(prefill_s, 1),
        },
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "size_seconds": size_seconds,
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


# ------------------------------------------------------------------------------------------ markdown
def per_turn_totals(report: dict[str, Any]) -> dict[str, Any]:
    """Per-turn tokens including each path's fixed text, and where each capsule path gets cheaper than ListMemory."""
    ov = report["fixed_overheads"]
    out: dict[str, Any] = {"rows": []}
    for unit, key in (("tok", "minilm_tokens"), ("≈tok", "bytes_div_4")):
        tool_fixed = ov["tool_schemas_json"][key] + ov["default_scaffolding"][key]
        read_fixed = ov["read_only_scaffolding"][key]
        big = report["summary"][-1]
        per_fact = big["tokens"]["listmemory"][f"{key}_mean"] / big["size"]
        tool_cap = statistics.fmean(s["tokens"]["tool_2048"][f"{key}_mean"] for s in report["summary"])
        upd_cap = statistics.fmean(s["tokens"]["update_1024"][f"{key}_mean"] for s in report["summary"])
        out[unit] = {
            "tool_fixed": tool_fixed,
            "update_fixed": read_fixed,
            "listmemory_per_fact": per_fact,
            "break_even_tool": (tool_fixed + tool_cap) / per_fact,
            "break_even_update": (read_fixed + upd_cap) / per_fact,
            "break_even_tool_capsule_only": tool_cap / per_fact,
        }
    for s in report["summary"]:
        t = s["tokens"]
        row = {"size": s["size"]}
        for unit, key in (("tok", "minilm_tokens"), ("≈tok", "bytes_div_4")):
            row[unit] = {
                "tool": out[unit]["tool_fixed"] + t["tool_2048"][f"{key}_mean"],
                "update": out[unit]["update_fixed"] + t["update_1024"][f"{key}_mean"],
                "listmemory": t["listmemory"][f"{key}_mean"],
            }
        out["rows"].append(row)
    return out


def totals_table(report: dict[str, Any]) -> list[str]:
    tot = per_turn_totals(report)
    a, b = tot["tok"], tot["≈tok"]
    lines = [
        "**Per turn including each path's fixed text** (tool path = tool schemas + scaffolding + capsule; "
        "update_context path = read-only scaffolding + capsule; ListMemory has no fixed text)",
        "",
        "| facts in memory | tool path: tok / ≈tok | update_context path: tok / ≈tok | ListMemory: tok / ≈tok |",
        "|---:|---:|---:|---:|",
    ]
    for r in tot["rows"]:
        lines.append(
            f"| {r['size']:,} | {_n(r['tok']['tool'])} / {_n(r['≈tok']['tool'])} | {_n(r['tok']['update'])} / "
            f"{_n(r['≈tok']['update'])} | {_n(r['tok']['listmemory'])} / {_n(r['≈tok']['listmemory'])} |"
        )
    lines += [
        "",
        f"ListMemory costs {a['listmemory_per_fact']:.1f} tok ({b['listmemory_per_fact']:.1f} ≈tok) per fact per "
        f"turn. Break-even (the memory size above which the capsule path injects fewer tokens than ListMemory): "
        f"update_context path ~{a['break_even_update']:.0f} facts ({b['break_even_update']:.0f} by ≈tok); "
        f"tool path with its fixed text ~{a['break_even_tool']:.0f} facts ({b['break_even_tool']:.0f} by ≈tok); "
        f"the tool capsule alone ~{a['break_even_tool_capsule_only']:.0f} facts "
        f"({b['break_even_tool_capsule_only']:.0f} by ≈tok).",
    ]
    return lines


def _n(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    ov = report["fixed_overheads"]
    lines = [
        f"Measured {report['date']} with `{report['command']}` ({report['wall_seconds']:.0f} s wall, "
        f"peak RSS {report['peak_rss_mb']:.0f} MB). Machine: {m['cpu']}, {m['nproc']} CPUs, {m['ram_gb']} GB RAM; "
        f"Python {m['python']}, torch {m['torch']} ({m['torch_threads']} threads), sentence-transformers "
        f"{m['sentence_transformers']}, autogen-core {m['autogen_core']}; load average "
        f"{' '.join(map(str, m['loadavg_start']))} at start, {' '.join(map(str, m['loadavg_end']))} at end.",
        "",
    ]
    lib = report.get("library")
    if lib:
        lines += [
            f"Library: autogen-shared-memory at git {lib.get('git', '?')}; search with its defaults: rrf_k="
            f"{lib['rrf_k']:g}, lexical_weight={lib['lexical_weight']:g}, semantic_weight={lib['semantic_weight']:g}, "
            f"search_depth={lib['search_depth']}, min_similarity={lib['min_similarity']:g}, context_weights="
            f"{lib.get('context_weights')}.",
            "",
        ]
    lines += [
        f"Layout: {report['setup'].get('layout', 'crew')} ("
        + (
            "all facts in the group scope"
            if report["setup"].get("layout") == "single"
            else "facts in the agent's own, the group and the global scope"
        )
        + ', searched as agent `coder` with `scope="all"`). '
        f"{report['setup']['queries']} probe questions at every size; tokens are per turn, mean over the "
        "questions (max in parentheses). **tok** = MiniLM WordPiece tokens (exact for that tokenizer); "
        "**≈tok** = UTF-8 bytes / 4 (rough estimate for GPT-style tokenizers).",
        "",
        "**Tokens injected per turn**",
        "",
        "| facts in memory | memory_search capsule (top 5, ≤2048 B): tok / ≈tok | update_context capsule "
        "(top 5, ≤1024 B + preamble): tok / ≈tok | ListMemory (all facts): tok / ≈tok | ListMemory ÷ tool capsule "
        "(tok) | all-memory fits a 128k window (≈tok) |",
        "|---:|---:|---:|---:|---:|:---:|",
    ]
    for s in report["summary"]:
        t = s["tokens"]
        tool, upd, lm = t["tool_2048"], t["update_1024"], t["listmemory"]
        fits = "yes" if lm["bytes_div_4_mean"] <= CONTEXT_WINDOW else "**no**"
        lines.append(
            f"| {s['size']:,} | {_n(tool['minilm_tokens_mean'])} ({tool['minilm_tokens_max']:,}) / "
            f"{_n(tool['bytes_div_4_mean'])} | {_n(upd['minilm_tokens_mean'])} ({upd['minilm_tokens_max']:,}) / "
            f"{_n(upd['bytes_div_4_mean'])} | {_n(lm['minilm_tokens_mean'])} ({lm['minilm_tokens_max']:,}) / "
            f"{_n(lm['bytes_div_4_mean'])} | {lm['minilm_tokens_mean'] / tool['minilm_tokens_mean']:,.1f}× | {fits} |"
        )
    lines += [
        "",
        "Fixed per-turn text that comes with each capsule path (not memory, independent of its size): the three "
        f"memory tool schemas as JSON {ov['tool_schemas_json']['minilm_tokens']:,} tok / "
        f"{_n(ov['tool_schemas_json']['bytes_div_4'])} ≈tok plus the default scaffolding "
        f"{ov['default_scaffolding']['minilm_tokens']:,} tok / {_n(ov['default_scaffolding']['bytes_div_4'])} ≈tok "
        f"(tool path); the read-only scaffolding {ov['read_only_scaffolding']['minilm_tokens']:,} tok / "
        f"{_n(ov['read_only_scaffolding']['bytes_div_4'])} ≈tok (update_context path).",
        "",
    ]
    big = report["summary"][-1]
    cap, only = big["tokens"]["tool_2048"], big["tokens"].get("tool_2048_fact_text_only")
    if only:
        shown = big["facts_shown_mean"]["tool_2048"]
        per_lm = big["tokens"]["listmemory"]["minilm_tokens_mean"] / big["size"]
        lines += [
            f"Where a capsule's tokens go (at {big['size']:,} facts): of the memory_search capsule's "
            f"{cap['minilm_tokens_mean']:.0f} tok ({cap['bytes_div_4_mean']:.0f} ≈tok), the facts' own text is "
            f"{only['minilm_tokens_mean']:.0f} tok ({only['bytes_div_4_mean']:.0f} ≈tok, "
            f"{only['minilm_tokens_mean'] / cap['minilm_tokens_mean']:.0%}); the rest is the header and each "
            "line's `[id | scope | by author | date | conf]` provenance (a 22-character hex id alone is ~15 MiniLM "
            f"tokens). Per fact shown that is {cap['minilm_tokens_mean'] / shown:.0f} tok in the capsule vs "
            f"{per_lm:.0f} tok per fact in ListMemory.",
            "",
        ]
    lines += totals_table(report)
    lines += [
        "",
        "**Relevant facts kept in the capsule** (relevant facts whose id is in the capsule ÷ relevant facts, "
        "mean over questions; [95% bootstrap interval over questions])",
        "",
        "| facts in memory | relevant facts | search top 5 (no size limit) | memory_search capsule ≤2048 B | "
        "update_context capsule ≤1024 B | all relevant kept (2048 / 1024) | none kept (2048 / 1024) | facts shown "
        "(2048 / 1024) | top_k=10 in ≤2048 B: recall (facts shown) | capsule lines: relevant / near-miss / "
        "background |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in report["summary"]:
        ci = s["recall_ci95"]
        r, a, z, sh, c = (
            s["recall"],
            s["all_relevant_in_capsule"],
            s["none_relevant_in_capsule"],
            s["facts_shown_mean"],
            s["capsule_2048_lines"],
        )
        lines.append(
            f"| {s['size']:,} | {s['relevant_facts']} | {r['search_top5']:.3f} | **{r['tool_2048']:.3f}** "
            f"[{ci['tool_2048'][0]:.2f}, {ci['tool_2048'][1]:.2f}] | **{r['update_1024']:.3f}** "
            f"[{ci['update_1024'][0]:.2f}, {ci['update_1024'][1]:.2f}] | "
            f"{a['tool_2048']:.2f} / {a['update_1024']:.2f} | "
            f"{z['tool_2048']:.2f} / {z['update_1024']:.2f} | {sh['tool_2048']:.1f} / {sh['update_1024']:.1f} | "
            f"{r['tool_top10_2048']:.3f} ({sh['tool_top10_2048']:.1f}) | "
            f"{c['relevant']} / {c['near_miss']} / {c['background']} |"
        )
    fams = list(report["summary"][0]["recall_by_family"])
    lines += [
        "",
        "**Recall by fact family** (memory_search capsule ≤2048 B / update_context capsule ≤1024 B)",
        "",
        "| facts in memory | " + " | ".join(fams) + " |",
        "|---:|" + "---:|" * len(fams),
    ]
    for s in report["summary"]:
        cells = [
            f"{s['recall_by_family'][f]['tool_2048']:.2f} / {s['recall_by_family'][f]['update_1024']:.2f}" for f in fams
        ]
        lines.append(f"| {s['size']:,} | " + " | ".join(cells) + " |")
    knobs = list(report["summary"][0].get("search_top5_recall_by_fusion", {}))
    if knobs:
        lines += [
            "",
            "**Search top-5 recall under other fusion settings** (same stores and questions; equals the capsule's "
            "recall whenever the byte budget does not bind"
            + (
                ", as in this run: search top 5 and capsule recall are equal at every size)"
                if all(s["recall"]["search_top5"] == s["recall"]["tool_2048"] for s in report["summary"])
                else ")"
            ),
            "",
            "| facts in memory | " + " | ".join(knobs) + " |",
            "|---:|" + "---:|" * len(knobs),
        ]
        for s in report["summary"]:
            v = s["search_top5_recall_by_fusion"]
            lines.append(f"| {s['size']:,} | " + " | ".join(f"{v[k]:.3f}" for k in knobs) + " |")
    cut = [
        f"{s['size']:,}: {s['relevant_cut_lines']['tool_2048']} / {s['relevant_cut_lines']['update_1024']}"
        for s in report["summary"]
    ]
    lines += [
        "",
        "Relevant facts present only as a line cut by the size limit (counted as kept; 2048 / 1024): "
        + "; ".join(cut)
        + ".",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--sizes", default="10,100,1000,3000,10000", help="memory sizes in facts (default %(default)s)")
    p.add_argument("--queries", type=int, default=50, help="probe questions, asked at every size (default 50)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", type=Path, help="write every number (and each probe's texts) here")
    p.add_argument("--out", type=Path, help="write the markdown tables here (default: stdout)")
    p.add_argument(
        "--layout",
        choices=["crew", "single"],
        default="crew",
        help="crew (default): facts in the agent's own, the group and the global scope, searched with "
        "scope='all'; single: the same facts all in the group scope (diagnostic)",
    )
    p.add_argument("--from-json", type=Path, help="render the markdown of a saved --json run; measure nothing")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    if not args.sizes or args.sizes[0] < 6:
        p.error("--sizes must be >= 6 (an episode holds up to 6 facts)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = parse_args(argv)
    if args.from_json:
        report = json.loads(args.from_json.read_text())
    else:
        report = asyncio.run(run(args))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1))
    md = render(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(md)
    else:
        print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
