"""Eval sets made from the user's own passages (``ragguard synth``): questions built
from sampled passages (without a model, or written by an LLM), each with its source
passage as the one (silver) label."""

from ragguard.calibration.synth.corpus import Corpus, Passage, read_corpus
from ragguard.calibration.synth.llm import QUESTION_PROMPT, Asked, Rejected, ask
from ragguard.calibration.synth.queries import METHODS, SynthQuery, synthesize, write_evalset

__all__ = [
    "METHODS",
    "QUESTION_PROMPT",
    "Asked",
    "Corpus",
    "Passage",
    "Rejected",
    "SynthQuery",
    "ask",
    "read_corpus",
    "synthesize",
    "write_evalset",
]
