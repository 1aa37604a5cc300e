"""SimCRAFT's dual-mode user simulation and intent clarification (§3.4.1 and App. D).

A seed task (an ``earthrl-mini`` TaskSpec with its reference workflow) becomes a user request in one of two modes:

- **expert**: every critical slot stated — the task's goal-only question (``AP`` phrasing) and the data manifest
  (``scene | sensor | date | bands``, one line per scene), i.e. the first user message of
  :meth:`~earthrl.envs.core.env.RSEnv.reset`;
- **novice**: the critical slots masked — the same question with the scene ids, sensor names, acquisition dates,
  year ranges and WRS-2 site removed (:func:`mask_question`), and no manifest. The agent must ask before it acts: the
  clarification turn asks for the area/scene, the sensor and the time range, and the simulated user answers with
  the manifest.

SimCRAFT masks a random subset of the slots; EarthRL masks the three together, because an archive scene id names
its sensor and date (``LE70350322008262EDC00`` is Landsat 7, 2008, day 262): masking one slot but keeping the id
would leak the others. A task whose answer options are slot values (``Options: A) 2008-06-30 …``) cannot be
asked without them and is not used in novice mode (:func:`maskable`).

:class:`Slots` holds a task's slot values; :func:`leaked` finds any of them in a text (the ``slot_leak`` check on
a novice query and on the clarification question, which cannot know them yet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the critical slots SimCRAFT's clarification agent tracks (App. D): spatial extent, sensor, time range
SLOT_KINDS = ("area", "sensor", "time")

#: sensor phrases of the question templates, longest first (each also matched alone as the family name)
_SENSOR = (r"(?:Sentinel-2(?: MSI)?|Landsat[ -]?\d(?: ETM\+| TM| OLI/TIRS| OLI)?|Landsat)")
_DATE = r"\d{4}-\d{2}-\d{2}"
_SITE = r"WRS-2 path \d+ row \d+"


@dataclass(frozen=True)
class Slots:
    """The critical slot values of one task (strings as they appear in an expert request).

    Attributes:
        area: the scene ids (the spatial extent of an archive scene; EarthRL's data has no free bounding boxes).
        sensor: the catalogue's sensor names, e.g. ``"landsat-7"``.
        time: acquisition dates ``YYYY-MM-DD``.
        aliases: other spellings of the same values: the sensors' names in questions (``"Landsat 7"``) and the
            compact dates ``YYYYMMDD``.
    """

    area: tuple[str, ...]
    sensor: tuple[str, ...]
    time: tuple[str, ...]
    aliases: tuple[str, ...] = ()

    def values(self) -> list[str]:
        """Every slot string, area first, aliases last."""
        return [*self.area, *self.sensor, *self.time, *self.aliases]

    def missing_from(self, text: str) -> list[str]:
        """The scene ids, sensors and dates that ``text`` does not state (case-insensitive; aliases not needed)."""
        low = text.lower()
        return [v for v in (*self.area, *self.sensor, *self.time) if v.lower() not in low]


_DISPLAY = {"sentinel-2": ("Sentinel-2",), "landsat-5": ("Landsat 5",), "landsat-7": ("Landsat 7",),
            "landsat-8": ("Landsat 8",)}


def slots_of(task: dict, scenes: dict) -> Slots:
    """The slots of ``task`` from its scenes (``scenes``: id → :class:`~earthrl.envs.data.scene.Scene` or any object
    with ``sensor`` and ``date``)."""
    got = [scenes[sid] for sid in task["data"]]
    sens = tuple(dict.fromkeys(s.sensor for s in got))
    dates = tuple(dict.fromkeys(s.date for s in got if s.date))
    aliases = [a for s in sens for a in _DISPLAY.get(s, ())] + [d.replace("-", "") for d in dates]
    return Slots(area=tuple(task["data"]), sensor=sens, time=dates, aliases=tuple(dict.fromkeys(aliases)))


def leaked(text: str, slots: Slots) -> list[str]:
    """The slot values that occur in ``text`` (case-insensitive), in :meth:`Slots.values` order."""
    low = text.lower()
    return [v for v in slots.values() if v.lower() in low]


def maskable(task: dict, slots: Slots) -> bool:
    """Whether ``task`` can be asked without its slots: its answer (value and options) names none of them."""
    ans = task["answer"]
    return not leaked(" ".join([str(ans.get("value", "")), *map(str, (ans.get("options") or {}).values())]), slots)


def mask_question(question: str, slots: Slots) -> str:
    """``question`` with the scene ids, sensors, dates, year ranges and WRS-2 site replaced by the vague words a
    novice uses (``my scene``, ``my site``, ``my period``); whitespace collapsed. Slots that survive the rules are
    caught by :func:`leaked` (the synthesis rejects the request as ``slot_leak``)."""
    ids = sorted(slots.area, key=len, reverse=True)
    idre = "(?:" + "|".join(map(re.escape, ids)) + ")" if ids else r"(?!x)x"
    order = iter(("my first scene", "my second scene", "my third scene") if len(ids) > 1 else ("my scene",) * 9)
    q = re.sub(rf"\s*\({idre}:\w+\)", "", question)  # "(S2_…:water)": the vector named after the scene
    q = re.sub(rf"(?:the )?(?:{_SENSOR} )?(?:scene )?{idre}(?: of {_DATE})?",
               lambda m: next(order, "my scene"), q)
    q = re.sub(rf"(?:the )?{_SENSOR} acquisitions? on {_DATE}(?:, {_DATE})*", "my acquisitions", q)
    q = re.sub(rf"[Bb]etween {_DATE} and {_DATE}", lambda m: m.group(0)[0] + "etween my two dates", q)
    q = re.sub(rf"(?:at|of|over) (?:the )?{_SITE}( site)?", "at my site", q)
    q = re.sub(r",? \d{4}-\d{4}", " over my period", q)
    q = re.sub(rf"(?:the )?{_SENSOR} ", "", q)
    q = re.sub(rf"(?:the )?{_SENSOR}\b", "the satellite", q)
    q = re.sub(rf"(?: of| on)? {_DATE}", "", q)
    return re.sub(r"\s+", " ", q).strip()


def manifest_text(task: dict, scenes: dict, line) -> str:
    """The data manifest of ``task`` as :meth:`~earthrl.envs.core.env.RSEnv.reset` writes it (``line``:
    :func:`~earthrl.envs.data.scene.scene_line`)."""
    return "Data (scene | sensor | date | bands):\n" + "\n".join(line(scenes[s]) for s in task["data"])


CLARIFY_QUESTION = ("Before I plan the workflow I need three details: which area or scene should I use, from which "
                    "sensor, and for which date or time range?")
"""The scripted clarification agent's question: it names the slot kinds, never a value."""


def clarify_reply(manifest: str) -> str:
    """The scripted simulated user's answer to the clarification question: every slot, as the manifest."""
    return f"Use these acquisitions.\n{manifest}"
