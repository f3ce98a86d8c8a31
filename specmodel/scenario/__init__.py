"""One operating point to predict, from flags or API arguments: the domain layer under the
``predict``/``report``/``plan`` commands and the Python API (:mod:`specmodel.api`).

``args`` holds the inputs as a user gives them (:class:`~specmodel.scenario.args.ScenarioArgs`, each
with its bound); ``resolve`` turns them into one :class:`~specmodel.scenario.resolve.Scenario` (a
profile, an :class:`~specmodel.model.inputs.Acceptance` and an
:class:`~specmodel.model.inputs.OperatingPoint`) and runs the prediction, so a notebook and the
command line cannot disagree. Beside them: ``parse`` (token counts, number lists, histograms),
``profiles`` (which profile a bare command uses), ``numbers`` (a profile from plain numbers, the
all-reduce refit) and ``accept`` (the one accept-length source, resolved).

No click and no pandas here: this is on ``predict``'s cold path. Errors name the ScenarioArgs field
(:class:`~specmodel.errors.FieldError`), never a flag: the CLI spells fields as flags through one
table (:mod:`specmodel.commands.flags`).
"""
