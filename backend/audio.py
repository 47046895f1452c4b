"""Audio clips as transformers loads them, in bounded memory.

The reference for what a clip *is* is transformers' own loader,
`transformers.audio_utils.load_audio(path, sampling_rate=16000)` with its soundfile
backend (the default when torchcodec is not installed, and what a processor's chat
template does with an audio path; the same steps as `librosa.load`): soundfile decodes
to float32, the channels are averaged, soxr resamples with quality "HQ", and the result
is padded or cut to ceil(frames · 16000 / rate) samples. `convert` computes exactly
those samples (tests/backend/test_audio_intake.py checks them bit for bit), but from
blocks of the file: the decoder, the mix-down and soxr's streaming resampler each hold a
block at a time and the samples go straight to the output file, so memory stays a few MB
whatever the clip's length, channels or rate.

A header that promises an absurd amount of decoding (a 255-channel Ogg, a FLAC at
655 kHz) is refused by `check_header` before anything is decoded (`ClipRefused`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLE_RATE = 16_000
MAX_SECONDS = 600.0
# ORT GenAI 0.18's audio front ends divide by zero (SIGFPE, the process dies) on clips of
# 160 samples or fewer at 16 kHz; no speech is that short, so a margin costs nothing.
MIN_SECONDS = 0.1
# Beyond these the file is not a recording anyone speaks into: 32 channels covers
# multitrack and third-order ambisonics, 384 kHz the fastest studio formats (DXD is
# 352.8 kHz), 4 kHz the slowest telephone and radio recordings.
MAX_CHANNELS = 32
MIN_RATE = 4_000
MAX_RATE = 384_000
# Samples decoded in all (channels × frames): the 600 s cap in 7.1 surround at 48 kHz,
# or stereo at 192 kHz. Memory does not depend on it (decoding goes by blocks); the time
# does: 1.6 s (FLAC) to 2.6 s (Ogg Vorbis) per 100 M samples here, so 4 to 6 s at the cap.
MAX_DECODED_SAMPLES = 8 * 48_000 * 600
# Frames decoded at a time: 32 channels × 16384 frames × 4 bytes is 2 MB.
BLOCK_FRAMES = 16_384


class ClipRefused(Exception):
    """A clip this app will not decode; `reason` and `hint` are for the user."""

    def __init__(self, reason: str, hint: str):
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


@dataclass(frozen=True)
class Converted:
    """What `convert` read and wrote.

    Attributes:
        channels: The source's channel count.
        rate: The source's sampling rate (Hz).
        frames: Frames decoded from the source.
        samples: Mono samples written at `SAMPLE_RATE`.
    """

    channels: int
    rate: int
    frames: int
    samples: int


def check_header(info: Any) -> None:
    """Refuse a clip whose header (soundfile's `info`) asks for too much decoding.

    Raises:
        ClipRefused: Too long, too many channels, an absurd rate, or too many samples.
    """
    channels, rate, frames = int(info.channels), int(info.samplerate), int(info.frames)
    if channels > MAX_CHANNELS or channels < 1:
        raise ClipRefused(
            f"it has {channels} audio channels (this app reads at most {MAX_CHANNELS})",
            "Mix it down to mono or stereo and attach that",
        )
    if not MIN_RATE <= rate <= MAX_RATE:
        raise ClipRefused(
            f"its sampling rate of {rate} Hz is outside {MIN_RATE}–{MAX_RATE} Hz",
            "Export it at 16 kHz (or 44.1 or 48 kHz) and attach that",
        )
    seconds = frames / rate
    if seconds > MAX_SECONDS:
        raise ClipRefused(
            f"{seconds:.0f} s of audio is too long",
            f"Cut it to under {MAX_SECONDS / 60:.0f} minutes",
        )
    if channels * frames > MAX_DECODED_SAMPLES:
        raise ClipRefused(
            f"{channels} channels at {rate} Hz for {seconds:.0f} s is more audio than this "
            f"app decodes ({MAX_DECODED_SAMPLES / 1e6:.0f} million samples at most)",
            "Mix it down to mono or stereo, or cut it shorter",
        )


def convert(source: Path, target: Path, block_frames: int = BLOCK_FRAMES) -> Converted:
    """Write `source` as transformers loads it: mono float32 WAV at `SAMPLE_RATE`.

    The samples written equal `load_audio(source, 16000, backend="soundfile")`. 32-bit
    float WAV keeps them exactly (16-bit PCM would round each one; ORT GenAI 0.18 reads
    float WAV as it reads PCM, measured in docs/chat-engine.md). Decoding stops with
    `ClipRefused` once the file yields more than the caps allow, whatever its header said.

    Raises:
        ClipRefused: The header asks for too much (see `check_header`), or the file
            holds more than it announced.
        RuntimeError: soundfile cannot decode the file (`sf.LibsndfileError` is one).
    """
    import numpy as np
    import soundfile as sf

    with sf.SoundFile(str(source)) as f:
        check_header(f)
        channels, rate = int(f.channels), int(f.samplerate)
        # The header can understate the length: the caps hold for what is decoded.
        limit = min(int(MAX_SECONDS * rate), MAX_DECODED_SAMPLES // channels)
        resampler = _Resampler(rate)
        block = np.empty((block_frames, channels), np.float32)
        frames = written = 0
        with sf.SoundFile(str(target), "w", SAMPLE_RATE, 1, "FLOAT", format="WAV") as out:
            while True:
                n = len(f.read(block_frames, dtype="float32", always_2d=True, out=block))
                frames += n
                if frames > limit:
                    raise ClipRefused(
                        "it holds more audio than its header says, over the limits of "
                        f"{MAX_SECONDS:.0f} s and {MAX_DECODED_SAMPLES / 1e6:.0f} million samples",
                        "Export the audio again or pick another file",
                    )
                last = n < block_frames
                mono = _mix_down(block[:n])
                samples = resampler.push(mono, last)
                out.write(samples)
                written += len(samples)
                if last:
                    break
            written = _fit_length(out, written, math.ceil(frames * SAMPLE_RATE / rate), rate)
    return Converted(channels=channels, rate=rate, frames=frames, samples=written)


def _mix_down(block: Any) -> Any:
    """The channel mean, summed in load_audio's order (a [channels, frames] view)."""
    if block.shape[1] == 1:
        return block[:, 0]
    return block.T.mean(axis=0)


class _Resampler:
    """soxr's streaming resampler to `SAMPLE_RATE` (identity at that rate).

    Its output equals `soxr.resample(whole, rate, 16000, quality="soxr_hq")`, the call
    load_audio makes, whatever the block sizes (checked in the tests).
    """

    def __init__(self, rate: int):
        self._stream: Any = None
        if rate != SAMPLE_RATE:
            import soxr

            self._stream = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")

    def push(self, mono: Any, last: bool) -> Any:
        """Resample one block (`last` flushes the filter's tail)."""
        if self._stream is None:
            return mono
        return self._stream.resample_chunk(mono, last=last)


def _fit_length(out: Any, written: int, expected: int, rate: int) -> int:
    """Pad with silence or cut the written file to load_audio's length; returns it.

    load_audio fixes the length to ceil(frames · 16000 / rate) after resampling; at
    16 kHz it keeps the samples as decoded.
    """
    import numpy as np

    if rate == SAMPLE_RATE or written == expected:
        return written
    if written < expected:
        out.write(np.zeros(expected - written, np.float32))
    else:
        out.flush()
        out.truncate(expected)
    return expected
