/**
 * Microphone audio at the audio context's rate -> PCM16 at the rate announced in `start`
 * (runs in the capture worklet, on the audio thread: no allocation per sample).
 *
 * Downsampling first removes what the lower rate cannot carry with a windowed-sinc
 * low-pass (Blackman window, cut-off at 0.45 of the output rate, so 7.2 kHz for 16 kHz),
 * long enough that what would fold back into the speech band is at least ~60 dB down;
 * then each output sample is interpolated linearly between the two filtered input samples
 * around it. Upsampling (a context slower than the announced rate) only interpolates.
 * Output comes in frames of `frameSamples` (20 ms by default).
 */

/** Filter length for a decimation of `step` input samples per output sample: odd, longer
 * for steeper decimation (the transition band of a Blackman window is about 5.5 / n). */
export function tapsFor(step: number): number {
  if (step <= 1) return 0;
  return 2 * Math.round(12 * step) + 1;
}

/** A windowed-sinc low-pass (Blackman window), unity gain at DC; `cutoff` in cycles per
 * input sample. */
export function lowPass(cutoff: number, n: number): Float32Array {
  const taps = new Float32Array(n);
  const mid = (n - 1) / 2;
  let sum = 0;
  for (let k = 0; k < n; k++) {
    const x = k - mid;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const w = 0.42 - 0.5 * Math.cos((2 * Math.PI * k) / (n - 1)) + 0.08 * Math.cos((4 * Math.PI * k) / (n - 1));
    taps[k] = sinc * w;
    sum += taps[k]!;
  }
  for (let k = 0; k < n; k++) taps[k]! /= sum;
  return taps;
}

export class Downsampler {
  /** Input samples per output sample. */
  readonly step: number;
  readonly frameSamples: number;
  #frame: Int16Array;
  #filled = 0;
  #t = 0; // where the next output sample lies between the previous input (0) and the current (1)
  #prev = 0;
  readonly #taps: Float32Array | null;
  // The filter's history, twice over: h[at] and h[at + n] hold the same sample, so the
  // newest n samples are always h[at .. at + n - 1], newest first, one contiguous run.
  readonly #history: Float32Array;
  #at = 0;

  constructor(
    readonly inputRate: number,
    readonly outputRate: number,
    frameSamples = Math.round(outputRate / 50),
  ) {
    if (!(inputRate > 0) || !(outputRate > 0)) throw new RangeError("sample rates must be positive");
    this.step = inputRate / outputRate;
    this.frameSamples = Math.max(1, Math.floor(frameSamples));
    this.#frame = new Int16Array(this.frameSamples);
    const n = tapsFor(this.step);
    this.#taps = n > 0 ? lowPass(0.45 / this.step, n) : null;
    this.#history = new Float32Array(2 * Math.max(n, 1));
  }

  #filter(x: number): number {
    const taps = this.#taps;
    if (taps === null) return x;
    const n = taps.length;
    const h = this.#history;
    this.#at = this.#at === 0 ? n - 1 : this.#at - 1;
    h[this.#at] = x;
    h[this.#at + n] = x;
    let y = 0;
    const at = this.#at;
    for (let k = 0; k < n; k++) y += taps[k]! * h[at + k]!;
    return y;
  }

  /** Feeds input samples (floats in [-1, 1]); `emit` receives each full frame, which it may
   * keep (or transfer): a new one is filled next. */
  push(input: ArrayLike<number>, emit: (frame: Int16Array) => void): void {
    const step = this.step;
    for (let i = 0; i < input.length; i++) {
      const y = this.#filter(input[i]!);
      while (this.#t <= 1) {
        const v = this.#prev + (y - this.#prev) * this.#t;
        this.#frame[this.#filled++] = Math.max(-32768, Math.min(32767, Math.round(v * 32767)));
        if (this.#filled === this.#frame.length) {
          const full = this.#frame;
          this.#frame = new Int16Array(full.length); // before `emit` may transfer `full`
          this.#filled = 0;
          emit(full);
        }
        this.#t += step;
      }
      this.#t -= 1;
      this.#prev = y;
    }
  }
}
