/**
 * The AudioWorklet processors (bundled on their own by scripts/build.mjs, loaded with
 * `audioWorklet.addModule`): thin shells around the pure `Downsampler` and `Playout`.
 *
 * - `rejoinder-capture`: the microphone (channels mixed to mono) -> PCM16 at the rate of
 *   `start`, posted to the main thread as 20 ms ArrayBuffers (transferred).
 * - `rejoinder-player`: agent PCM16 -> the speakers; posts `played` reports, tagged with the
 *   epoch of the connection they belong to (a report still in flight when the client
 *   reconnected is recognised as stale and dropped).
 * - `rejoinder-clock`: a tick every `seconds` of audio time, a clock that keeps running in
 *   a background tab, where page timers are throttled (the WebRTC path reads its stats on it).
 */

import { Downsampler } from "../audio/resampler.js";
import { Playout } from "../audio/playout.js";

interface ProcessorBase {
  readonly port: MessagePort;
}

interface WorkletScope {
  readonly sampleRate: number;
  readonly currentFrame: number;
  readonly currentTime: number;
  readonly AudioWorkletProcessor: new (options?: unknown) => ProcessorBase;
  registerProcessor(name: string, processor: unknown): void;
}

const scope = globalThis as unknown as WorkletScope;

type Channels = readonly (readonly Float32Array[])[];

interface ProcessorOptions<T> {
  readonly processorOptions: T;
}

export type PlayerCommand =
  | { readonly type: "reset"; readonly epoch: number }
  | { readonly type: "config"; readonly rate: number; readonly latency: number }
  | { readonly type: "latency"; readonly latency: number }
  | { readonly type: "audio"; readonly pcm: ArrayBuffer }
  | { readonly type: "clear" };

export interface PlayerMessage {
  readonly epoch: number;
  readonly played: number;
  readonly playing: boolean;
  readonly cleared: boolean;
}

class CaptureProcessor extends scope.AudioWorkletProcessor {
  readonly #downsampler: Downsampler;
  #mono = new Float32Array(128);
  readonly #emit = (frame: Int16Array): void => this.port.postMessage(frame.buffer, [frame.buffer]);

  constructor(options: ProcessorOptions<{ sampleRate: number }>) {
    super();
    this.#downsampler = new Downsampler(scope.sampleRate, options.processorOptions.sampleRate);
  }

  process(inputs: Channels): boolean {
    const channels = inputs[0];
    if (channels === undefined || channels.length === 0) return true;
    let samples: Float32Array = channels[0]!;
    if (channels.length > 1) {
      if (this.#mono.length !== samples.length) this.#mono = new Float32Array(samples.length);
      const mono = this.#mono;
      mono.fill(0);
      for (const channel of channels) for (let i = 0; i < mono.length; i++) mono[i]! += channel[i]!;
      for (let i = 0; i < mono.length; i++) mono[i]! /= channels.length;
      samples = mono;
    }
    this.#downsampler.push(samples, this.#emit);
    return true;
  }
}

class PlayerProcessor extends scope.AudioWorkletProcessor {
  readonly #playout = new Playout(scope.sampleRate);
  #epoch = 0;

  constructor() {
    super();
    this.port.onmessage = (event: MessageEvent<PlayerCommand>) => this.#command(event.data);
  }

  #command(command: PlayerCommand): void {
    const frame = scope.currentFrame;
    switch (command.type) {
      case "reset":
        this.#epoch = command.epoch;
        this.#playout.reset(frame);
        break;
      case "config":
        this.#playout.configure(command.rate);
        this.#playout.setLatency(command.latency);
        break;
      case "latency":
        this.#playout.setLatency(command.latency);
        break;
      case "audio":
        this.#playout.write(new Int16Array(command.pcm, 0, command.pcm.byteLength >> 1));
        break;
      case "clear":
        this.#post(this.#playout.clear(frame));
        break;
    }
  }

  #post(report: { played: number; playing: boolean; cleared: boolean }): void {
    const message: PlayerMessage = { epoch: this.#epoch, ...report };
    this.port.postMessage(message);
  }

  process(_inputs: Channels, outputs: Channels): boolean {
    const channels = outputs[0]!;
    const out = channels[0]!;
    const report = this.#playout.render(out, scope.currentFrame);
    for (let c = 1; c < channels.length; c++) channels[c]!.set(out);
    if (report !== null) this.#post(report);
    return true;
  }
}

class ClockProcessor extends scope.AudioWorkletProcessor {
  readonly #every: number;
  #next: number;

  constructor(options: ProcessorOptions<{ seconds: number }>) {
    super();
    this.#every = Math.max(1, Math.round(options.processorOptions.seconds * scope.sampleRate));
    this.#next = scope.currentFrame + this.#every;
  }

  process(): boolean {
    if (scope.currentFrame >= this.#next) {
      this.#next = scope.currentFrame + this.#every;
      this.port.postMessage(scope.currentTime);
    }
    return true;
  }
}

scope.registerProcessor("rejoinder-capture", CaptureProcessor);
scope.registerProcessor("rejoinder-player", PlayerProcessor);
scope.registerProcessor("rejoinder-clock", ClockProcessor);
