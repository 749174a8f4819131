"""Framework adapters: translate framework objects to Candidates and back.

Import the one you use on purpose; ``import ragguard`` never imports a framework::

    from ragguard.adapters.langchain import GuardedRetriever, GuardCompressor
    from ragguard.adapters.llamaindex import GuardedRetriever, GuardPostprocessor
    from ragguard.adapters.haystack import GuardRanker

Usually you need none of these imports: ``ContextGuard.wrap(retriever)``,
``ContextGuard.as_compressor()``, ``ContextGuard.as_postprocessor()`` and
``ContextGuard.as_haystack()`` pick the adapter.
"""

__all__: list[str] = []
