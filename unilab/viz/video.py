"""Video files from frames, through imageio (the optional `video` extra): mp4 via imageio-ffmpeg's
bundled ffmpeg (no system ffmpeg needed), gif via Pillow."""

from __future__ import annotations

from pathlib import Path

FORMATS = (".mp4", ".gif")
EXTRA_HINT = "pip install 'unilab[video]'"


class VideoExtraMissing(RuntimeError):
    pass


def check_video_path(path: str | Path, flag: str = "--video") -> Path:
    """The file a video goes to; ValueError for a directory, a missing parent or an unknown format."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise ValueError(f"{flag} {path}: is a directory; give a file name, e.g. {p / 'play.mp4'}")
    if not p.parent.is_dir():
        raise ValueError(f"{flag} {path}: {p.parent} is not a directory")
    if p.suffix.lower() not in FORMATS:
        raise ValueError(f"{flag} {path}: unknown video format {p.suffix or '(none)'!r}; "
                         f"end the name with {' or '.join(FORMATS)}")
    return p


def require_imageio(gif: bool = False):
    """imageio (and, for mp4, its ffmpeg plugin), or VideoExtraMissing naming the extra to install."""
    try:
        import imageio.v2 as iio

        if not gif:
            import imageio_ffmpeg  # noqa: F401
    except ImportError as exc:
        raise VideoExtraMissing(f"writing videos needs imageio and imageio-ffmpeg ({exc.name} is missing): "
                                f"{EXTRA_HINT}") from None
    return iio


class VideoWriter:
    """Frames to `path` at `fps`. Closing with ok=False (an error mid-way) removes the partial file."""

    def __init__(self, path: str | Path, fps: float):
        self.path = Path(path)
        gif = self.path.suffix.lower() == ".gif"
        iio = require_imageio(gif)
        if gif:
            self._writer = iio.get_writer(self.path, mode="I", duration=1000.0 / fps, loop=0)
        else:
            # macro_block_size=2: H.264 in yuv420p needs even sides; callers ask for even sizes, so no rescale.
            self._writer = iio.get_writer(self.path, fps=fps, codec="libx264", quality=7, macro_block_size=2,
                                          ffmpeg_log_level="error")
        self.frames = 0

    def append(self, frame) -> None:
        self._writer.append_data(frame)
        self.frames += 1

    def close(self, ok: bool = True) -> None:
        try:
            self._writer.close()
        finally:
            if not ok:
                self.path.unlink(missing_ok=True)
