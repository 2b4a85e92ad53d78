"""What the command sets before numpy loads (imported first by `nagleprobe.cli`).

numpy's OpenBLAS starts a thread per core, and they spin for a while after any call;
nagleprobe does no linear algebra, and on a two-core machine the spinning took CPU from the
analysis. A value the user set is kept. Not done for `import nagleprobe`: a notebook's own
linear algebra keeps its threads.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
