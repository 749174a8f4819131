"""Eval sets made from the user's own passages (``ragguard synth``): questions built
from sampled passages, each with its source passage as the one (silver) label."""

from ragguard.calibration.synth.corpus import Corpus, Passage, read_corpus
from ragguard.calibration.synth.queries import METHODS, SynthQuery, synthesize, write_evalset

__all__ = [
    "METHODS",
    "Corpus",
    "Passage",
    "SynthQuery",
    "read_corpus",
    "synthesize",
    "write_evalset",
]
