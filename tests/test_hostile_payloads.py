"""Data never names code: every entry point that rebuilds something from data (a TOML
config, the environment, a pipeline dict or YAML, a saved postprocessor, a trained
folder's model card and model files, ``ragguard calibrate --rerank DIR``) is given a
hostile payload. Each payload names a module whose import writes a marker file, a
ragguard internal that imports what its argument names (``ragguard._optional.require``,
``ragguard._optional.import_object``, also reachable as
``ragguard.calibration.data.inputs.import_object``) or ``os.system``. Every test asserts
that a typed one-line error came back and that the module was never imported."""

from __future__ import annotations

import json
import sys
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import ragguard
from ragguard import ContextGuard, GuardConfig
from ragguard.errors import ConfigError, RagguardError, RerankModelError
from ragguard.rerank import CrossEncoderReranker
from ragguard.trained import (
    PACKAGED_ENCODER,
    TrainedReranker,
    load_encoder,
    model_kind,
    resolve_model,
)
from tests.trained_folders import fusion_card, trained_folder

ROOT = Path(__file__).resolve().parents[1]
# ragguard helpers that import what their first argument names: installed as a reranker,
# the end user's query would name the module
INTERNAL_GADGETS = (
    "ragguard._optional.require",
    "ragguard._optional.import_object",
    "ragguard.calibration.data.inputs.import_object",
)


@dataclass(frozen=True)
class Evil:
    """A module on sys.path (and in the current folder) whose import writes ``marker``."""

    name: str
    marker: Path

    def untouched(self) -> None:
        assert not self.marker.exists(), f"module {self.name} was imported"
        assert self.name not in sys.modules, f"module {self.name} was imported"


@pytest.fixture
def evil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Evil]:
    name = f"rg_evil_{uuid.uuid4().hex[:10]}"
    marker = tmp_path / f"{name}.imported"
    (tmp_path / f"{name}.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('imported')\n"
        "def get_model_path():\n    return '/nonexistent'\n"
        "def score(query, texts):\n    return [1.0] * len(texts)\n"
        "score.score_kind = 'probability'\n"
        "class Module:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    evil = Evil(name, marker)
    yield evil
    sys.modules.pop(name, None)
    evil.untouched()


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, text
    return text


# --------------------------------------------------------------------------- trained folders


def hostile_folders(tmp_path: Path, evil: Evil) -> dict[str, Path]:
    """Trained folders whose card or model files name the evil module."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": f"{evil.name}.Module"}]
    activation = {"sentence_transformers": {"activation_fn": f"{evil.name}.Module"}}
    remote = {
        "architectures": ["BertForSequenceClassification"],
        "auto_map": {"AutoModelForSequenceClassification": f"{evil.name}.Module"},
    }
    return {
        "encoder package": trained_folder(
            tmp_path / "f1", fusion_card(encoder=f"package:{evil.name}")
        ),
        "encoder name": trained_folder(tmp_path / "f2", fusion_card(encoder=evil.name)),
        "cross-encoder package": trained_folder(
            tmp_path / "f3", fusion_card(cross_encoder=f"package:{evil.name}")
        ),
        "bi-encoder modules.json": trained_folder(
            tmp_path / "f4",
            fusion_card(kind="bi-encoder", encoder="encoder", fusion_head=None),
            files={"encoder/modules.json": modules, "encoder/config.json": {}},
        ),
        "fusion encoder/modules.json": trained_folder(
            tmp_path / "f5",
            fusion_card(encoder="encoder"),
            files={"encoder/modules.json": modules},
        ),
        "cross-encoder activation": trained_folder(
            tmp_path / "f6",
            fusion_card(kind="cross-encoder", encoder=None, fusion_head=None),
            files={
                "config.json": {"architectures": ["BertForSequenceClassification"], **activation}
            },
        ),
        "cross-encoder auto_map": trained_folder(
            tmp_path / "f7",
            fusion_card(kind="new-cross-encoder", encoder=None, fusion_head=None),
            files={"config.json": remote},
        ),
    }


def test_a_trained_folder_never_imports_what_its_files_name(tmp_path: Path, evil: Evil) -> None:
    """Audit TR-11: a card's ``"encoder": "package:NAME"`` imported NAME on the first
    load_reranker(DIR); here every loader of a trained folder, every tampered file."""
    for case, folder in hostile_folders(tmp_path, evil).items():
        loaders = {
            "TrainedReranker": lambda f=folder: TrainedReranker(f),
            "CrossEncoderReranker": lambda f=folder: CrossEncoderReranker(str(f)).load(),
            "load_reranker": lambda f=folder: ragguard.load_reranker(str(f))("q", ["t"]),
        }
        for how, load in loaders.items():
            with pytest.raises(RerankModelError) as info:
                load()
            one_line(info.value)
            assert folder.name in str(info.value) or str(folder) in str(info.value), (case, how)
            evil.untouched()


def test_no_spec_imports_a_package_it_names(evil: Evil) -> None:
    """``package:NAME`` means the packaged model(s) only: ``--base package:x`` of
    train-reranker, an encoder spec, a model to resolve."""
    for load in (resolve_model, load_encoder, model_kind):
        with pytest.raises(RerankModelError, match=PACKAGED_ENCODER) as info:
            load(f"package:{evil.name}")
        one_line(info.value)
        evil.untouched()


def test_a_config_naming_a_tampered_folder_builds_no_guard(
    tmp_path: Path, evil: Evil, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit CX-05: ``[rerank] model = DIR`` in a TOML config reached the same import."""
    folder = hostile_folders(tmp_path, evil)["encoder package"]
    config = tmp_path / "ragguard.toml"
    config.write_text(
        f'score_kind = "similarity"\n[rerank]\nenabled = true\nmodel = "{folder.name}"\n'
    )
    with pytest.raises(RerankModelError) as info:
        ContextGuard.from_file(config)
    one_line(info.value)
    evil.untouched()
    # the same through the environment and through a dict
    monkeypatch.setenv("RAGGUARD_RERANK", json.dumps({"enabled": True, "model": str(folder)}))
    with pytest.raises(RerankModelError):
        ContextGuard(GuardConfig())
    monkeypatch.delenv("RAGGUARD_RERANK")
    with pytest.raises(RerankModelError):
        ContextGuard(
            GuardConfig.model_validate({"rerank": {"enabled": True, "model": str(folder)}})
        )
    evil.untouched()


def test_a_config_naming_code_builds_no_guard(tmp_path: Path, evil: Evil) -> None:
    for rerank in (
        {"external": f"{evil.name}:score"},
        {"model": f"package:{evil.name}"},
        {"model": evil.name, "score_kind": "probability"},
    ):
        config = GuardConfig.model_validate({"rerank": {"enabled": True, **rerank}})
        with pytest.raises(RagguardError) as info:
            ContextGuard(config)
        one_line(info.value)
        evil.untouched()
    # token counters name a tokenizer file or encoding, never a module
    for counter in (f"hf:./{evil.name}", f"tiktoken:{evil.name}"):
        pytest.importorskip(counter.split(":")[0].replace("hf", "tokenizers"))
        with pytest.raises(ConfigError, match=evil.name):
            ContextGuard(GuardConfig(max_tokens=100, token_counter=counter))
        evil.untouched()


def test_calibrate_rerank_dir_with_a_tampered_card(tmp_path: Path, evil: Evil) -> None:
    """CX-08: ``ragguard calibrate --rerank DIR`` whose card names a module."""
    from ragguard.cli import app

    folder = hostile_folders(tmp_path, evil)["encoder package"]
    result = CliRunner().invoke(
        app,
        ["calibrate", str(ROOT / "examples" / "notes"), "--rerank", str(folder),
         "--no-report", "--out", str(tmp_path / "a.toml"),
         "--rerank-cache", str(tmp_path / "cache")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and PACKAGED_ENCODER in errors[0], result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "a.toml").exists()
    evil.untouched()


# --------------------------------------------------------------------------- Haystack


def _haystack_payload() -> dict[str, Any]:
    from haystack import Pipeline

    pipe = Pipeline()
    guard = ContextGuard(GuardConfig(score_kind="similarity"))
    pipe.add_component("guard", guard.as_haystack())
    return pipe.to_dict()


def _tampered(field: str, value: object, rerank: dict[str, Any] | None = None) -> dict[str, Any]:
    data = _haystack_payload()
    params = data["components"]["guard"]["init_parameters"]
    params[field] = value
    params["guard_config"]["rerank"].update(
        {"enabled": True, "score_kind": "probability", **(rerank or {})}
    )
    return data


@pytest.mark.parametrize("field", ["reranker", "code_reranker"])
def test_a_haystack_pipeline_cannot_install_a_reranker(field: str, evil: Evil) -> None:
    """HS-23, HS-24: a tampered pipeline loaded with allowed_modules=["ragguard"] (and
    the module it names) installs nothing it names."""
    from haystack import Document, Pipeline

    from ragguard.adapters.haystack import GuardRanker

    for name in (*INTERNAL_GADGETS, "os.system", f"{evil.name}.score", ["os", "system"]):
        data = _tampered(field, name)
        with pytest.raises(ConfigError) as info:
            GuardRanker.from_dict(data["components"]["guard"])
        one_line(info.value)
        assert "register_reranker" in str(info.value)
        for load in (
            lambda d=data: Pipeline.from_dict(d, allowed_modules=["ragguard", "os", evil.name]),
            lambda d=data: Pipeline.loads(_yaml(d), allowed_modules=["ragguard", "os", evil.name]),
        ):
            with pytest.raises(Exception) as raised:
                pipe = load()
                # had it loaded, the end user's query would name the module
                pipe.run(
                    {"guard": {"query": evil.name, "documents": [Document(content="t", score=0.9)]}}
                )
            assert _caused_by(raised.value, ConfigError), raised.value
        evil.untouched()


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return str(yaml.safe_dump(data))


def _caused_by(exc: BaseException | None, kind: type[BaseException]) -> bool:
    while exc is not None:
        if isinstance(exc, kind):
            one_line(exc)
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def test_a_haystack_pipeline_naming_a_tampered_folder(tmp_path: Path, evil: Evil) -> None:
    from ragguard.adapters.haystack import GuardRanker

    folder = hostile_folders(tmp_path, evil)["encoder package"]
    for rerank in ({"model": str(folder)}, {"external": f"{evil.name}:score"}):
        data = _tampered("reranker", None, rerank)
        with pytest.raises(RagguardError) as info:
            GuardRanker.from_dict(data["components"]["guard"])
        one_line(info.value)
        evil.untouched()


# --------------------------------------------------------------------------- LlamaIndex, LangChain


def test_a_saved_llamaindex_postprocessor_cannot_install_a_reranker(
    tmp_path: Path, evil: Evil
) -> None:
    from ragguard.adapters.llamaindex import GuardPostprocessor

    saved = ContextGuard(GuardConfig(score_kind="similarity")).as_postprocessor().to_dict()
    saved["guard_config"]["rerank"].update({"enabled": True, "score_kind": "probability"})
    for name in (*INTERNAL_GADGETS, "os.system", f"{evil.name}.score"):
        data = {**saved, "code_reranker": name}
        for load in (
            lambda d=data: GuardPostprocessor.from_dict(d),
            lambda d=data: GuardPostprocessor.from_json(json.dumps(d)),
        ):
            with pytest.raises(ConfigError) as info:
                load()
            one_line(info.value)
        evil.untouched()
    folder = hostile_folders(tmp_path, evil)["encoder package"]
    data = json.loads(json.dumps(saved))
    data["guard_config"]["rerank"]["model"] = str(folder)
    with pytest.raises(RerankModelError):
        GuardPostprocessor.from_dict(data)
    # an unknown key cannot smuggle a reranker in either
    plain = ContextGuard(GuardConfig(score_kind="similarity")).as_postprocessor().to_dict()
    with pytest.raises(ConfigError, match="reranker_path"):
        GuardPostprocessor.from_dict({**plain, "reranker_path": f"{evil.name}.score"})
    evil.untouched()


def test_langchain_cannot_rebuild_a_guard_from_data(evil: Evil) -> None:
    """LangChain's ``dumpd`` does not serialise ragguard's objects, and a constructor
    payload for them (even with the classes allowed) cannot give a guard."""
    from langchain_core._api import LangChainBetaWarning
    from langchain_core.load import Serializable, dumpd, load
    from langchain_core.retrievers import BaseRetriever

    from ragguard.adapters.langchain import GuardCompressor, GuardedRetriever

    class Empty(BaseRetriever):
        def _get_relevant_documents(self, query: str, **kwargs: Any) -> list[Any]:
            return []

    guard = ContextGuard(GuardConfig(score_kind="similarity"))
    assert dumpd(guard.wrap(Empty()))["type"] == "not_implemented"
    assert dumpd(guard.as_compressor())["type"] == "not_implemented"
    # the compressor is no Serializable: LangChain's loader cannot even be told to allow it
    assert not issubclass(GuardCompressor, Serializable)
    payload = {
        "lc": 1,
        "type": "constructor",
        "id": [*GuardedRetriever.__module__.split("."), GuardedRetriever.__name__],
        "kwargs": {"guard": {"reranker": f"{evil.name}.score"}},
    }
    with pytest.raises(ConfigError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore", LangChainBetaWarning)  # load() is in beta
        load(payload, allowed_objects=[GuardedRetriever], valid_namespaces=["ragguard"])
    one_line(info.value)
    evil.untouched()
