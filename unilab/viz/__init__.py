"""Seeing a policy: headless frames of the batched worlds (render), the task's markers (markers),
video files (video), the passive viewer (viewer) and OpenGL backend selection (gl)."""
