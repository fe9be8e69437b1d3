"""The needles of `tisa-hf longembed`: 100 names, and 100 facts with the question each answers.

Every fact names a different person, so a question has exactly one right document whichever other facts the
candidate documents hold; ten templates of different kinds (objects, places, numbers, colours, ...) with ten
values each keep the facts varied, and every value is distinct within its template.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMES = (
    "Abigail", "Adrian", "Agatha", "Alistair", "Amara", "Ambrose", "Annika", "Anselm", "Aurelia", "Bartholomew",
    "Beatrix", "Benedikt", "Bianca", "Casimir", "Cecilia", "Cordelia", "Cornelius", "Dagny", "Desmond", "Dorothea",
    "Eamon", "Edmund", "Eleonora", "Elias", "Esmeralda", "Evander", "Fabian", "Felicity", "Fenella", "Florian",
    "Gideon", "Giselle", "Griselda", "Gunnar", "Hamish", "Henrietta", "Horatio", "Ignatius", "Imogen", "Isadora",
    "Jasper", "Jocasta", "Joaquin", "Juniper", "Kasimira", "Leander", "Leopold", "Lucinda", "Magnus", "Marisol",
    "Maximilian", "Melisande", "Mortimer", "Nadia", "Nikolai", "Octavia", "Odessa", "Orlando", "Ottoline",
    "Peregrine", "Perpetua", "Philippa", "Quentin", "Rosalind", "Rupert", "Sabine", "Seraphina", "Severin",
    "Sigrid", "Solveig", "Tabitha", "Tancred", "Thaddeus", "Theodora", "Tobias", "Ursula", "Valentin", "Vesna",
    "Wilhelmina", "Winifred", "Xavier", "Yolanda", "Yusuf", "Zenobia", "Zoltan", "Anatole", "Clementine",
    "Dmitri", "Euphemia", "Fitzgerald", "Guinevere", "Hyacinth", "Lysander", "Marguerite", "Oswin", "Persephone",
    "Radomir", "Sebastiano", "Ludmila", "Wolfram",
)  # fmt: skip

# (fact, question, ten values): "{name}" and "{value}" are filled in.
TEMPLATES = (
    (
        "{name} keeps an old {value} in the attic.",
        "What does {name} keep in the attic?",
        ("telescope", "harp", "canoe", "typewriter", "globe", "saddle", "anvil", "violin", "lantern", "sextant"),
    ),
    (
        "The favourite fruit of {name} is the {value}.",
        "What is the favourite fruit of {name}?",
        ("mango", "papaya", "apricot", "lychee", "quince", "guava", "persimmon", "kumquat", "pomegranate", "fig"),
    ),
    (
        "{name} was born in the town of {value}.",
        "In which town was {name} born?",
        ("Bergen", "Cusco", "Tromso", "Galway", "Nagano", "Ushuaia", "Zermatt", "Hobart", "Siena", "Tartu"),
    ),
    (
        "The code of the safe that belongs to {name} is {value}.",
        "What is the code of the safe that belongs to {name}?",
        ("3817", "5092", "7264", "1948", "6630", "2475", "8159", "4306", "9721", "5583"),
    ),
    (
        "{name} drives a {value} bicycle to work.",
        "What colour is the bicycle {name} drives to work?",
        ("crimson", "turquoise", "orange", "violet", "silver", "olive", "scarlet", "teal", "amber", "maroon"),
    ),
    (
        "The dog of {name} is called {value}.",
        "What is the dog of {name} called?",
        ("Biscuit", "Pepper", "Waffle", "Nugget", "Pickle", "Truffle", "Noodle", "Muffin", "Pretzel", "Dumpling"),
    ),
    (
        "In the town band, {name} plays the {value}.",
        "Which instrument does {name} play in the town band?",
        ("trombone", "saxophone", "clarinet", "tuba", "oboe", "bassoon", "flute", "cornet", "piccolo", "euphonium"),
    ),
    (
        "Last summer {name} studied {value} in the mountains.",
        "What did {name} study in the mountains last summer?",
        ("glaciers", "lichens", "beetles", "meteorites", "fossils", "orchids", "falcons", "mosses", "bats", "ants"),
    ),
    (
        "The dish {name} cooks best is {value}.",
        "Which dish does {name} cook best?",
        ("lasagna", "paella", "goulash", "risotto", "moussaka", "ratatouille", "biryani", "ramen", "tagine", "pho"),
    ),
    (
        "{name} has climbed the mountain {value} times.",
        "How many times has {name} climbed the mountain?",
        ("three", "seven", "eleven", "twelve", "fifteen", "nineteen", "twenty", "thirty", "forty", "sixty"),
    ),
)


@dataclass(frozen=True)
class Needle:
    """A sentence placed in one document, and the query whose answer it holds."""

    text: str
    query: str


def needle_facts() -> list[Needle]:
    """The 100 facts: fact i names NAMES[i], with template i % 10 and that template's value i // 10."""
    facts = []
    for index, name in enumerate(NAMES):
        fact, question, values = TEMPLATES[index % len(TEMPLATES)]
        value = values[index // len(TEMPLATES)]
        facts.append(Needle(fact.format(name=name, value=value), question.format(name=name)))
    return facts


PASSKEY_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."


def passkey_needles(keys: list[int]) -> list[Needle]:
    """LongEmbed's passkey sentences, one per name, with the 5-digit `keys` (one per name, in NAMES order)."""
    return [
        Needle(
            f"{name}'s pass key is {key}. Remember it. {key} is the pass key for {name}.",
            f"what is the pass key for {name}?",
        )
        for name, key in zip(NAMES, keys, strict=True)
    ]
