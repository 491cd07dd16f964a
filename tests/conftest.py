"""Suite-wide test settings.

Property tests explore new examples on every local run. Under CI (the CI environment
variable set) they run derandomized, so that a submission's verdict does not depend on the
examples one run happened to draw. Neither has a per-example deadline.
"""

from __future__ import annotations

import os

from hypothesis import settings

# No per-example deadline: the suite runs on a 2-core machine with its tests in parallel,
# where a scheduling hiccup can hold one example for a second; the run's timeout still
# catches a test that hangs.
settings.register_profile("local", deadline=None)
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "local")
