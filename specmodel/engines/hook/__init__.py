"""What both engine hooks share: the annotation seam and its stopwatch (:mod:`.annotate`), patching
a module on import and the rank files (:mod:`.patch`), the calibration probe (:mod:`.calibration`,
read back by :mod:`.probe`), reading the rank files (:mod:`.records`), the ``sitecustomize`` shim
(:mod:`.shim`) and running a server under the hook (:mod:`.run`).

Kept free of torch and of any engine import at module level: the shim loads the hooks in every
Python process a server starts."""
