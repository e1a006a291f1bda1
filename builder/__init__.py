"""The guide's build, step by step; build.py is the recipe that runs these steps in order.

    common    paths, BuildError, log, hashing, downloads, atomic writes, the cache lock
    wheels    deterministic wheels, bytecode, the checked cache of processed wheels, the
              guide's own wheel (sim/ and widgets/ only), the check of every shipped wheel
    runtime   the offline runtime: Pyodide core, the pinned wheels, BokehJS and Panel's JS
    prerender each figure built in CPython: its Bokeh document and its poster
    posters   the SVG poster of a figure's default state, painted with the page's HTML
    pages     chapters (front matter, figure() calls, macros), figure pages, index, references
    slides    the example slide deck (site/slides/) and reveal.js from its pinned npm package
    output    gzip copies, MANIFEST.json, the atomic swap into place, recovery, signals
    serve     the local server (gzip-aware)
    export    (--export only) each figure's PNG and SVG in its default and named states, and
              a self-contained page of it, rendered in Chromium with the network refused

Everything here runs at build time on CPython; none of it ships to the browser.
"""
