"""Deterministic crew-memory text for the benchmarks: word lists, fact and query generators.

A fact is a *core* sentence (one of 12 templates over people, teams, tools, tasks, projects, customers,
regions, ...) plus a *detail* clause (dates, cities, ticket numbers, ...); every generated text is distinct.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from autogen_shared_memory.search.text import query_terms, stem


def _words(text: str) -> list[str]:
    return text.split()


FIRST = _words("""Priya Tom Ana Lukas Mei Omar Sara Diego Hana Ivan Lea Noah Yuki Amir Elena Felix Grace
Hugo Ines Jonas Kira Liam Maya Nils Olga Pablo Rosa Sami Tara Umar Vera Wen Xavier Yara Zoe Arjun Bea Carlos
Dana Emil Farah Gita Henrik Isla Jin Kofi Lina Marco Nadia Oscar""")
LAST = _words("""Novak Berg Silva Kim Okafor Rossi Tanaka Muller Haddad Larsen Costa Dubois Ivanova Park Sato
Nguyen Fischer Moreau Kowalski Santos Ahmed Jensen Lopez Weber Popescu Horvat Ali Meyer Garcia Nakamura Petrov
Russo Schmidt Yilmaz Eriksen Bianchi Kaur Mendes Novotny Lindqvist""")
TEAMS = _words("""payments billing platform search growth mobile data security infra support onboarding ledger
identity checkout analytics frontend backend compliance logistics pricing reporting notifications""")
TOOLS = [
    "Postgres",
    "Redis",
    "Kafka",
    "ClickHouse",
    "Terraform",
    "Airflow",
    "dbt",
    "Grafana",
    "Prometheus",
    "Sentry",
    "Datadog",
    "Snowflake",
    "BigQuery",
    "Elasticsearch",
    "RabbitMQ",
    "Celery",
    "FastAPI",
    "Django",
    "React",
    "Vue",
    "Kubernetes",
    "Helm",
    "ArgoCD",
    "Jenkins",
    "GitHub Actions",
    "Vault",
    "Nginx",
    "Envoy",
    "DuckDB",
    "Spark",
    "Flink",
    "Pandas",
    "Polars",
    "Jupyter",
    "Metabase",
    "Looker",
    "Tableau",
    "Figma",
    "Notion",
    "Jira",
    "Linear",
    "Slack",
    "PagerDuty",
    "Opsgenie",
    "MinIO",
    "S3",
    "SQLite",
    "MongoDB",
    "Cassandra",
    "Neo4j",
]
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
    "on-call handover",
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
    "SLA reporting",
    "GDPR deletions",
    "pricing experiments",
    "mobile crash triage",
    "partner onboarding",
    "audit trails",
]
PROJECTS = _words("""Atlas Borealis Cobalt Dynamo Ember Falcon Glacier Helios Indigo Juniper Kestrel Lumen
Meridian Nebula Onyx Polaris Quartz Raven Sierra Tundra Umbra Vortex Willow Xenon Zephyr Aurora Basalt Cinder
Drift Echo""")
CUSTOMERS = _words("""Acme Globex Initech Umbrella Hooli Vandelay Soylent Stark Wayne Tyrell Cyberdyne Wonka
Oscorp Aperture Gringotts Monarch Dunder Sterling Prestige Nakatomi Virtucon Oceanic Zorg Weyland Yoyodyne""")
FEATURES = [
    "CSV import",
    "SSO login",
    "webhook retries",
    "bulk invoicing",
    "the mobile checkout",
    "PDF export",
    "two-factor auth",
    "the search filter",
    "currency conversion",
    "scheduled reports",
    "the API pagination",
    "password reset",
    "refund flow",
    "usage metering",
    "the admin dashboard",
    "data sync",
    "audit log export",
    "team invitations",
    "the billing portal",
    "push notifications",
]
CONDITIONS = [
    "the file has more than 10k rows",
    "the user has two accounts",
    "the timezone is UTC+13",
    "the session expires mid-flow",
    "the card is declined twice",
    "the locale is Turkish",
    "the network drops on mobile",
    "a webhook arrives out of order",
    "the invoice total is zero",
    "the user name contains emoji",
    "the export spans a DST change",
    "the proxy strips headers",
    "two admins edit at once",
    "the token is older than 30 days",
    "the payload exceeds 5 MB",
]
CITIES = _words("""Lisbon Berlin Nairobi Osaka Toronto Austin Warsaw Dublin Seoul Lagos Lima Oslo Porto Prague
Madrid Milan Mumbai Sydney Denver Boston Zurich Vienna Helsinki Tallinn Bogota Santiago Cairo Istanbul Hanoi
Manila""")
REGIONS = _words("""eu-west-1 eu-central-1 us-east-1 us-west-2 ap-southeast-1 ap-northeast-1 sa-east-1
ca-central-1 eu-north-1 af-south-1""")
CLOUDS = ["AWS", "GCP", "Azure", "Hetzner", "OVH", "Fly.io"]
WEEKDAYS = _words("Monday Tuesday Wednesday Thursday Friday")
MONTHS = _words("January February March April May June July August September October November December")
FOODS = _words("""peanuts shellfish gluten lactose sesame soy eggs mushrooms cilantro olives""")
DISHES = ["sushi", "tacos", "ramen", "falafel", "pizza", "pho", "curry", "poke bowls", "dumplings", "salads"]
DATA_KINDS = [
    "payment events",
    "session logs",
    "support transcripts",
    "invoices",
    "user profiles",
    "audit events",
    "clickstream data",
    "model features",
    "email receipts",
    "chat attachments",
]
PLANS = ["Starter", "Team", "Business", "Enterprise", "Scale"]
CURRENCIES = ["EUR", "USD", "GBP", "JPY", "CHF"]
SERVICES = [
    "the Stripe API",
    "the GitHub API",
    "the Slack API",
    "our public API",
    "the geocoding service",
    "the SMS gateway",
    "the OpenAI proxy",
    "the search cluster",
    "the payments gateway",
    "the CRM sync",
]
RELATIONS = ["manager", "mentor", "backup on-call", "tech lead", "product partner", "skip-level manager"]
PREFIXES = ["PAY", "OPS", "SEC", "DATA", "WEB", "MOB", "INF", "SUP"]


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


_CORES: list[Callable[[random.Random], str]] = [
    lambda r: f"{_person(r)} on the {r.choice(TEAMS)} team prefers {r.choice(TOOLS)} for {r.choice(TASKS)}",
    lambda r: (
        f"The {r.choice(PROJECTS)} project deploys to {r.choice(CLOUDS)} {r.choice(REGIONS)} every {r.choice(WEEKDAYS)}"
    ),
    lambda r: f"{r.choice(CUSTOMERS)} reported that {r.choice(FEATURES)} fails when {r.choice(CONDITIONS)}",
    lambda r: (
        f"Pin {r.choice(TOOLS)} to version {r.randint(1, 19)}.{r.randint(0, 30)} in "
        f"{r.choice(PROJECTS)} because newer releases break {r.choice(TASKS)}"
    ),
    lambda r: f"The {r.choice(RELATIONS)} of {_person(r)} is {_person(r)}, who handles {r.choice(TASKS)}",
    lambda r: (
        f"The {r.choice(TEAMS)} team standup is at {r.randint(8, 11)}:"
        f"{r.choice(['00', '15', '30', '45'])} {r.choice(CITIES)} time on {r.choice(WEEKDAYS)}s"
    ),
    lambda r: (
        f"{r.choice(CUSTOMERS)} pays {r.randint(2, 400) * 50} {r.choice(CURRENCIES)} per month on the "
        f"{r.choice(PLANS)} plan"
    ),
    lambda r: (
        f"The rate limit for {r.choice(SERVICES)} is {r.choice([10, 20, 50, 100, 300, 600, 1000])} "
        f"requests per {r.choice(['second', 'minute', 'hour'])} per {r.choice(['key', 'tenant', 'IP'])}"
    ),
    lambda r: f"{_person(r)} is allergic to {r.choice(FOODS)} and prefers {r.choice(DISHES)} for team lunches",
    lambda r: (
        f"{r.choice(PROJECTS)} stores {r.choice(DATA_KINDS)} in {r.choice(TOOLS)} in "
        f"{r.choice(REGIONS)} with a retention of {r.choice([7, 14, 30, 90, 180, 365, 730])} days"
    ),
    lambda r: (
        f"Escalate {r.choice(TASKS)} incidents for {r.choice(CUSTOMERS)} to {_person(r)} via "
        f"{r.choice(['PagerDuty', 'Slack', 'email', 'phone', 'Opsgenie'])}"
    ),
    lambda r: (
        f"The {r.choice(TEAMS)} team decided to replace {r.choice(TOOLS)} with {r.choice(TOOLS)} for {r.choice(TASKS)}"
    ),
]

_DETAILS: list[Callable[[random.Random], str]] = [
    lambda r: f"noted on {r.choice(MONTHS)} {r.randint(1, 28)}, {r.randint(2019, 2025)}",
    lambda r: f"confirmed by {_person(r)} in {r.choice(CITIES)}",
    lambda r: f"see ticket {r.choice(PREFIXES)}-{r.randint(1000, 99999)}",
    lambda r: f"according to the {r.choice(TEAMS)} runbook revision {r.randint(2, 240)}",
    lambda r: f"as of sprint {r.randint(1, 400)} in {r.choice(MONTHS)}",
    lambda r: f"per {_person(r)}'s message on {r.choice(WEEKDAYS)}",
    lambda r: f"agreed in the {r.choice(CITIES)} offsite with {r.randint(3, 40)} people",
]

_QUERIES: list[Callable[[random.Random], str]] = [
    lambda r: f"what does {_person(r)} prefer for {r.choice(TASKS)}?",
    lambda r: f"which tool does the {r.choice(TEAMS)} team use for {r.choice(TASKS)}",
    lambda r: f"where and when does {r.choice(PROJECTS)} deploy in {r.choice(REGIONS)}",
    lambda r: f"known problems {r.choice(CUSTOMERS)} reported with {r.choice(FEATURES)}",
    lambda r: f"when is the {r.choice(TEAMS)} standup in {r.choice(CITIES)}",
    lambda r: f"who handles {r.choice(TASKS)} for {_person(r)}",
    lambda r: f"rate limit of {r.choice(SERVICES)} per {r.choice(['key', 'tenant', 'IP'])}",
    lambda r: f"how long do we keep {r.choice(DATA_KINDS)} for {r.choice(PROJECTS)}",
    lambda r: f"what plan is {r.choice(CUSTOMERS)} on and how much do they pay in {r.choice(CURRENCIES)}",
    lambda r: f"food allergies of {_person(r)} for the team lunch with {r.choice(DISHES)}",
    lambda r: f"why is {r.choice(TOOLS)} pinned in {r.choice(PROJECTS)}",
    lambda r: f"who to page for {r.choice(TASKS)} incidents at {r.choice(CUSTOMERS)}",
    lambda r: f"did {r.choice(TEAMS)} replace {r.choice(TOOLS)}",
]


@dataclass
class Corpus:
    """Distinct fact texts, each tagged with the index of its core sentence."""

    cores: list[str]
    facts: list[str]
    core_of: dict[str, int]


def make_cores(n: int, rng: random.Random) -> list[str]:
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(rng.choice(_CORES)(rng), None)
    return list(seen)


def make_corpus(n_facts: int, n_cores: int, seed: int) -> Corpus:
    rng = random.Random(seed)
    cores = make_cores(n_cores, rng)
    facts: list[str] = []
    core_of: dict[str, int] = {}
    while len(facts) < n_facts:
        c = len(facts) % n_cores if len(facts) < n_cores else rng.randrange(n_cores)
        text = f"{cores[c]}, {rng.choice(_DETAILS)(rng)}."
        if text not in core_of:
            core_of[text] = c
            facts.append(text)
    return Corpus(cores, facts, core_of)


def make_facts(n: int, seed: int, exclude: set[str] | None = None) -> list[str]:
    """``n`` distinct full facts (core + detail), each with its own core, none in ``exclude``."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        text = f"{rng.choice(_CORES)(rng)}, {rng.choice(_DETAILS)(rng)}."
        if not exclude or text not in exclude:
            out.setdefault(text, None)
    return list(out)


def stem_collision(query: str) -> bool:
    """True if two distinct query words share a Porter stem ("reported ... reports")."""
    terms = query_terms(query)
    return len({stem(t) for t in terms}) != len(terms)


def make_queries(n: int, seed: int) -> list[str]:
    """``n`` distinct queries, leaving out those hitting the stem-collision bug (see ``probe_stem_bug``)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        q = rng.choice(_QUERIES)(rng)
        if not stem_collision(q):
            out.setdefault(q, None)
    return list(out)
