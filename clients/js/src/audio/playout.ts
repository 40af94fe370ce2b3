/**
 * The agent's voice on the WebSocket path, and the playback truth (runs in the player
 * worklet, on the audio thread; pure, so node tests drive it block by block).
 *
 * Agent PCM16 at the server's rate is queued and read out at the audio context's rate,
 * interpolating linearly. `played` counts the server's samples the read head has passed;
 * `heard` is that count as it stood `latency` seconds ago (the output device's latency,
 * which the main thread passes in): a sample counts once it has reached the speaker, not
 * when it arrived, was queued or rendered. Silence played while the queue is empty counts
 * for nothing.
 *
 * Reports: every `reportSeconds` of audio time while the count moves, and once more when it
 * settles (the queue ran dry and the listener heard its end). `clear()` drops the queue at
 * once and reports where playback stopped, marked cleared: what was rendered already is
 * still heard, so it counts.
 *
 * Playback of a queue starts once `prebufferSeconds` of audio is queued or has waited that
 * long, so a reply that arrives in small frames does not stutter at its start.
 */

export interface PlayoutReport {
  /** Server samples heard so far, in total (never decreases until `reset`). */
  readonly played: number;
  /** Audio is still playing (or rendered and not yet heard). */
  readonly playing: boolean;
  readonly cleared: boolean;
}

export interface PlayoutOptions {
  prebufferSeconds?: number;
  reportSeconds?: number;
}

export class Playout {
  #rate: number; // the server's rate
  #step = 1; // server samples per output sample
  #latencyFrames = 0;
  #buf: Float32Array;
  #r = 0; // read position (fractional, into #buf)
  #w = 0; // write position
  #played = 0;
  #heard = 0;
  #reported = 0;
  #lastReport = 0; // output frame of the last report
  #marks: Array<[number, number]> = []; // [output frame, played] after each block, oldest first
  #playing = false;
  #waitingSince = -1;
  readonly #prebufferSeconds: number;
  readonly #reportFrames: number;

  constructor(
    readonly outputRate: number,
    options: PlayoutOptions = {},
  ) {
    this.#rate = outputRate;
    this.#buf = new Float32Array(Math.round(outputRate * 10));
    this.#prebufferSeconds = options.prebufferSeconds ?? 0.04;
    this.#reportFrames = (options.reportSeconds ?? 0.05) * outputRate;
  }

  get played(): number {
    return this.#played;
  }

  get heard(): number {
    return this.#heard;
  }

  /** Server samples queued and not played yet. */
  get queued(): number {
    return Math.max(0, this.#w - Math.floor(this.#r));
  }

  /** The server's rate (from `ready`). */
  configure(sourceRate: number): void {
    this.#rate = sourceRate;
    this.#step = sourceRate / this.outputRate;
  }

  /** The output device's latency, in seconds. */
  setLatency(seconds: number): void {
    this.#latencyFrames = Math.max(0, Math.round((Number.isFinite(seconds) ? seconds : 0) * this.outputRate));
  }

  write(samples: Int16Array): void {
    const start = Math.floor(this.#r);
    if (this.#w + samples.length > this.#buf.length) {
      const live = this.#w - start;
      const size = Math.max(this.#buf.length, 2 * (live + samples.length));
      if (size === this.#buf.length) this.#buf.copyWithin(0, start, this.#w);
      else {
        const next = new Float32Array(size);
        next.set(this.#buf.subarray(start, this.#w));
        this.#buf = next;
      }
      this.#r -= start;
      this.#w = live;
    }
    for (let i = 0; i < samples.length; i++) this.#buf[this.#w + i] = samples[i]! / 32768;
    this.#w += samples.length;
  }

  /** Drops the queue now; the report says where playback stopped. */
  clear(frame: number): PlayoutReport {
    this.#w = Math.floor(this.#r);
    this.#r = this.#w;
    this.#playing = false;
    this.#waitingSince = -1;
    this.#marks.length = 0;
    this.#heard = this.#played; // rendered already: the listener hears it
    return this.#report(frame, true);
  }

  /** A new connection: nothing queued, counts from zero. */
  reset(frame: number): void {
    this.#r = this.#w = 0;
    this.#played = this.#heard = this.#reported = 0;
    this.#lastReport = frame;
    this.#marks.length = 0;
    this.#playing = false;
    this.#waitingSince = -1;
  }

  #report(frame: number, cleared: boolean): PlayoutReport {
    this.#reported = this.#heard;
    this.#lastReport = frame;
    return { played: this.#heard, playing: this.#playing || this.#heard !== this.#played, cleared };
  }

  /** Fills `out` (one render quantum starting at output frame `frame`); returns a report
   * when one is due. */
  render(out: Float32Array, frame: number): PlayoutReport | null {
    const buffered = this.#w - this.#r;
    if (!this.#playing && buffered > 0) {
      if (this.#waitingSince < 0) this.#waitingSince = frame;
      const waited = (frame - this.#waitingSince) / this.outputRate;
      if (buffered >= this.#prebufferSeconds * this.#rate || waited >= this.#prebufferSeconds) {
        this.#playing = true;
        this.#waitingSince = -1;
      }
    }
    const buf = this.#buf;
    for (let i = 0; i < out.length; i++) {
      if (!this.#playing) {
        out[i] = 0;
        continue;
      }
      const k = Math.floor(this.#r);
      const a = buf[k]!;
      const b = k + 1 < this.#w ? buf[k + 1]! : 0;
      out[i] = a + (b - a) * (this.#r - k);
      this.#r += this.#step;
      this.#played += Math.min(Math.floor(this.#r), this.#w) - k;
      if (this.#r >= this.#w) {
        this.#r = this.#w; // drained: what was sent has been played
        this.#playing = false;
      }
    }
    const end = frame + out.length;
    this.#marks.push([end, this.#played]);
    const due = end - this.#latencyFrames;
    while (this.#marks.length > 0 && this.#marks[0]![0] <= due) this.#heard = this.#marks.shift()![1];
    if (this.#heard === this.#reported) return null;
    const settled = this.#heard === this.#played && !this.#playing;
    if (settled || frame - this.#lastReport >= this.#reportFrames) return this.#report(frame, false);
    return null;
  }
}
