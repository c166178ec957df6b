"""Jobs shipped to the nodes and run there: the smoke-training job (`validators.smoke`, run with
torchrun), the host checks (`validators.hostcheck`), a serving node's checks
(`validators.serving`) and a training job that resumes from its checkpoints after a preemption
or a spot interruption (`validators.resumable`, run by srun).
They import only torch and the Python standard library (nvidia-ml-py where it is importable),
never rackform: rackform passes every expectation and threshold in as arguments."""

import warnings

# Without numpy (or with one it cannot load) torch warns at import, in several lines, and the
# job then dies in its first collective; validators.deps checks for it first and says so in one
# line naming the install command, so torch's own warning is only noise.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
