"""Reports: an analysed run becomes something to read.

In: a run's stages and its analysis. Out: the HTML report (``html``: the page, built from
``inputs`` → ``words`` → ``figures`` / ``htmltables`` → ``sections`` / ``cards``, with its
fixed text in ``templates/``), its charts as SVG and PNG (``charts``), and the plain text the
commands print at the terminal: the answer's tables, verdicts and flags (``terminal``: crossover,
three or more configurations, open loop, a simulator profile's expected table) and the stage table
(``table``). The analysis, the simulator's own answers in it, is read or made by loadgen.analysis.answer; the
fronts in ``loadgen/cli`` only print these.
"""
