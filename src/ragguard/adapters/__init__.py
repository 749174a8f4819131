"""Framework adapters: translate framework objects to Candidates and back.

Import the one you use on purpose; ``import ragguard`` never imports a framework::

    from ragguard.adapters.langchain import GuardedRetriever, GuardCompressor
    from ragguard.adapters.llamaindex import GuardedRetriever, GuardPostprocessor

Usually you need neither import: ``ContextGuard.wrap(retriever)``,
``ContextGuard.as_compressor()`` and ``ContextGuard.as_postprocessor()`` pick the adapter.
"""

__all__: list[str] = []
