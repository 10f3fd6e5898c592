"""Where tracking episodes start: a (clip, start frame) pair drawn over bins of the motion library.

Every clip's start frames are cut into bins of about `bin_s` seconds. The env reports each episode
end with the frame it ended on; terminations (not time-outs or clip ends) are counted in the bin of
that frame, and every step each bin's count is folded into an exponential moving average: the bin's
smoothed failure rate. In `adaptive` mode a bin is drawn with probability

    (1 - uniform_share) * blurred_rate[b] / sum(blurred_rate)  +  uniform_share * floor[b]

where `blurred_rate[b] = sum_k blur^k rate[b + k]` over the next `blur_bins` bins of the same clip
(an episode that fails in bin j is best practised from a little before j), and the floor is uniform
over the clips, then over each clip's start frames, so a short clip is not starved by long ones. The failure
part is global over all bins: the policy's attention goes where it fails, whichever clip that is.
While nothing has failed yet the floor alone is used.

With `max_clip_share` below 1 no clip takes more than that share of the failure part: a clip the
policy cannot play (in the 21-clip library, the crawl up a slope) would otherwise draw most starts to
itself and starve the clips it can learn. What a capped clip gives up goes to the other failing clips
in proportion to their failure weight (water-filling, a fixed number of rounds); what no failing clip
can take goes to the floor. In `uniform` mode every start frame of the library is equally likely. The
start frame is uniform inside the drawn bin.

Everything is fixed-shape tensor work on the env's generator (inverse-CDF sampling with
`searchsorted`), so it runs inside the env's captured CUDA graph without a host read.
"""

from __future__ import annotations

import math

import torch

# Per-clip failure share of finished episodes, smoothed per step that finishes one of the clip's
# episodes: a metric only, quick enough to follow training.
CLIP_RATE_SMOOTHING = 0.05
MAX_CLIPS_LOGGED = 16  # beyond this only aggregates are logged (the collector keeps a bounded set of scalars)
# Water-filling rounds of the per-clip cap: a round either caps more clips (the growth of the others
# pushed them over) or changes nothing. Leftovers after the last round go to the floor, so the cap
# holds whatever the number of rounds; more rounds only hand less of the excess to the floor.
CAP_ROUNDS = 4


class StartSampler:
    def __init__(self, lengths, offsets, fps: float, cfg, device: torch.device, generator: torch.Generator):
        self.device, self.generator, self.cfg = device, generator, cfg
        self.adaptive = cfg.mode == "adaptive"
        lengths = [int(x) for x in lengths]
        offsets = [int(x) for x in offsets]
        bin_frames = max(1, int(round(cfg.bin_s * fps)))
        clip, lo, size, first, count = [], [], [], [], []
        for c, (length, offset) in enumerate(zip(lengths, offsets)):
            starts = length - 1  # the last frame starts no episode: nothing to track after it
            n = max(1, math.ceil(starts / bin_frames))
            first.append(len(clip))
            count.append(n)
            for b in range(n):
                clip.append(c)
                lo.append(offset + b * bin_frames)
                size.append(min(bin_frames, starts - b * bin_frames))
        self.bin_frames = bin_frames
        self.num_clips, self.num_bins = len(lengths), len(clip)

        def t(x, dtype=torch.long):
            return torch.as_tensor(x, dtype=dtype, device=device)

        self.bin_clip, self.bin_lo, self.bin_size = t(clip), t(lo), t(size)
        self.clip_first_bin, self.clip_num_bins, self.clip_offset = t(first), t(count), t(offsets)
        if self.adaptive:  # each clip 1/C, spread over its start frames (a clip's last bin may be shorter)
            starts = torch.as_tensor([n - 1 for n in lengths], device=device).float()
            self.floor = self.bin_size.float() / (self.num_clips * starts[self.bin_clip])
        else:
            self.floor = self.bin_size.float() / float(sum(size))
        # blur_index[k, b] = b + k where that bin is in b's clip (else b itself, with weight 0).
        k = torch.arange(max(1, int(cfg.blur_bins)), device=device)[:, None]
        ahead = torch.arange(self.num_bins, device=device)[None] + k
        inside = (ahead < self.num_bins) & (self.bin_clip[ahead.clamp(max=self.num_bins - 1)] == self.bin_clip[None])
        self.blur_index = torch.where(inside, ahead, torch.arange(self.num_bins, device=device)[None].expand_as(ahead))
        self.blur_weight = inside.float() * float(cfg.blur) ** k.float()

        self.bin_failure_rate = torch.zeros(self.num_bins, device=device)
        self.clip_failure_rate = torch.zeros(self.num_clips, device=device)

    # ------------------------------------------------------------ sampling
    def probabilities(self) -> torch.Tensor:
        """(bins,) probability of each bin being drawn, summing to 1."""
        if not self.adaptive:
            return self.floor
        weight = (self.bin_failure_rate[self.blur_index] * self.blur_weight).sum(dim=0)
        total = weight.sum()
        failure = weight / total.clamp_min(1e-12)
        share = float(self.cfg.uniform_share)
        to_floor = share
        cap = float(self.cfg.max_clip_share)
        if cap < 1.0:  # without a cap the step's sampling does no more work than before the cap existed
            failure = self._capped(failure, cap)
            to_floor = share + (1.0 - share) * (1.0 - failure.sum())  # what the cap left over joins the floor
        mixed = (1.0 - share) * failure + to_floor * self.floor
        return torch.where(total > 0, mixed, self.floor)

    def _capped(self, failure: torch.Tensor, cap: float) -> torch.Tensor:
        """`failure` (bins, summing to 1) with no clip above `cap`, the excess moved to the uncapped clips."""
        for _ in range(CAP_ROUNDS):
            per_clip = self._per_clip(failure)
            over = per_clip >= cap * (1.0 - 1e-6)  # at the cap counts: a clip capped last round stays put
            free = torch.where(over, torch.zeros_like(per_clip), per_clip).sum()
            room = (1.0 - over.float().sum() * cap).clamp_min(0.0)
            grow = torch.where(free > 0, room / free.clamp_min(1e-12), torch.ones_like(free))
            scale = torch.where(over, cap / per_clip.clamp_min(1e-12), grow)
            failure = failure * scale[self.bin_clip]
        keep = (cap / self._per_clip(failure).clamp_min(1e-12)).clamp(max=1.0)  # the last round may overfill a clip
        return failure * keep[self.bin_clip]

    def _per_clip(self, p: torch.Tensor) -> torch.Tensor:
        return torch.zeros(self.num_clips, device=self.device).index_add_(0, self.bin_clip, p)

    def sample(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(n,) clip ids and (n,) start frames (indices into the concatenated library)."""
        cdf = torch.cumsum(self.probabilities(), dim=0)
        u = torch.rand(2, n, device=self.device, generator=self.generator)
        bins = torch.searchsorted(cdf, (u[0] * cdf[-1]).contiguous(), right=True).clamp(max=self.num_bins - 1)
        size = self.bin_size[bins]
        frame = self.bin_lo[bins] + torch.minimum((u[1] * size).long(), size - 1)
        return self.bin_clip[bins], frame

    def bin_of(self, clip: torch.Tensor, frame: torch.Tensor) -> torch.Tensor:
        """(N,) bin of concatenated-library `frame` in `clip` (the clip's last frame: its last bin)."""
        local = torch.div(frame - self.clip_offset[clip], self.bin_frames, rounding_mode="floor")
        return self.clip_first_bin[clip] + torch.minimum(local.clamp_min(0), self.clip_num_bins[clip] - 1)

    # ------------------------------------------------------------ statistics
    def record(self, clip: torch.Tensor, frame: torch.Tensor, ended: torch.Tensor, failed: torch.Tensor) -> None:
        """Fold one step's episode ends into the smoothed rates. In place: the tensors keep their storage."""
        fails = torch.zeros(self.num_bins, device=self.device).index_add_(0, self.bin_of(clip, frame), failed.float())
        alpha = float(self.cfg.smoothing)
        self.bin_failure_rate.mul_(1.0 - alpha).add_(fails, alpha=alpha)

        ends = torch.zeros(self.num_clips, device=self.device).index_add_(0, clip, ended.float())
        clip_fails = torch.zeros(self.num_clips, device=self.device).index_add_(0, clip, failed.float())
        share = clip_fails / ends.clamp_min(1.0)
        updated = self.clip_failure_rate + CLIP_RATE_SMOOTHING * (share - self.clip_failure_rate)
        self.clip_failure_rate.copy_(torch.where(ends > 0, updated, self.clip_failure_rate))

    def metrics(self, names) -> dict[str, torch.Tensor]:
        """Per-clip failure rates (up to MAX_CLIPS_LOGGED clips), the sampling entropy (1: uniform over
        bins), the largest share of starts any one clip gets and which clip that is (its index in the
        library, clips sorted by name: a library too large for per-clip rates still names it)."""
        p = self.probabilities()
        out: dict[str, torch.Tensor] = {}
        if len(names) <= MAX_CLIPS_LOGGED:
            for i, name in enumerate(names):
                out[f"metrics/clip/{name}/failure_rate"] = self.clip_failure_rate[i]
        else:
            out["metrics/clip_failure_rate_max"] = self.clip_failure_rate.max()
            out["metrics/clip_failure_rate_mean"] = self.clip_failure_rate.mean()
        entropy = -(p * torch.log(p.clamp_min(1e-12))).sum()
        out["metrics/sampling/entropy"] = (entropy / math.log(self.num_bins) if self.num_bins > 1
                                           else torch.ones_like(entropy))
        per_clip = self._per_clip(p)
        out["metrics/sampling/max_clip_share"] = per_clip.max()
        out["metrics/sampling/max_clip_index"] = per_clip.argmax().float()
        return out
