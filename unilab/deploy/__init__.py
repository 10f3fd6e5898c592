"""Running an exported policy outside training: plain MuJoCo on the CPU, the ONNX file and its metadata alone
(numpy, onnxruntime, mujoco; no torch, no warp). `unilab sim2sim` is its command (cli.py).

- policy: the ONNX file of a run or a path, read with onnxruntime; its metadata checked.
- model: the MuJoCo model to run it on: ours (unilab.assets.g1) or mjlab's G1 MJCF with our actuators.
- observe: the observation built from MjData as the metadata describes it; the action's PD targets.
- walk: the walk task's command grid (or one command), with pushes; eval's metrics.
- video: frames of a rollout to an mp4 (imageio, optional; the OpenGL backend chosen by unilab.viz.gl).
"""
