/**
 * The Web Audio side in a browser: an AudioContext, the worklet module, the microphone,
 * the capture and player worklets (WebSocket path) and an audio-clock tick (WebRTC path).
 *
 * The context is created first, synchronously, so that `connect()` called from a click
 * gets a running context (browsers start audio only on a user gesture). Every way this can
 * fail has its own message: no Web Audio, a context the browser keeps suspended, no
 * AudioWorklet (an insecure page), a worklet module that cannot load (a Content Security
 * Policy without `blob:`: pass `workletUrl`), no microphone or no permission for it.
 */

import { RejoinderError } from "../errors.js";
import type { AudioOptions, AudioSession, Player, PlayerReport } from "../platform.js";
import type { PlayerCommand, PlayerMessage } from "../worklet/processors.js";

/** The worklet module's source, put in the bundle by scripts/build.mjs. */
declare const __REJOINDER_WORKLET__: string | undefined;

const RESUME_TIMEOUT_MS = 3000;
const LATENCY_REFRESH_MS = 1000;

function secureHint(): string {
  return globalThis.isSecureContext === false
    ? ": it needs a secure page (serve it over HTTPS, or open it on localhost or 127.0.0.1)"
    : "";
}

function workletSource(): string {
  if (typeof __REJOINDER_WORKLET__ !== "string") {
    throw new RejoinderError(
      "audio_worklet_unavailable",
      "this build has no embedded worklet: pass `workletUrl` (the package's dist/worklet.js)",
    );
  }
  return __REJOINDER_WORKLET__;
}

async function loadWorklet(context: AudioContext, url: string | URL | undefined): Promise<void> {
  if (!context.audioWorklet) {
    throw new RejoinderError("audio_worklet_unavailable", `AudioWorklet is unavailable${secureHint()}`);
  }
  let href: string;
  let revoke = false;
  if (url !== undefined) href = String(url);
  else {
    href = URL.createObjectURL(new Blob([workletSource()], { type: "text/javascript" }));
    revoke = true;
  }
  try {
    await context.audioWorklet.addModule(href);
  } catch (error) {
    const hint = revoke
      ? " (a Content-Security-Policy that forbids blob: scripts needs the `workletUrl` option)"
      : "";
    throw new RejoinderError(
      "audio_worklet_unavailable",
      `the audio worklet could not be loaded${hint}: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  } finally {
    if (revoke) URL.revokeObjectURL(href);
  }
}

const MICROPHONE_ERRORS: Record<string, string> = {
  NotAllowedError: "permission to use the microphone was denied",
  SecurityError: "permission to use the microphone was denied",
  NotFoundError: "no microphone was found",
  OverconstrainedError: "no microphone was found",
  NotReadableError: "the microphone could not be opened (another application may be using it)",
  AbortError: "the microphone could not be opened",
};

async function openMicrophone(): Promise<MediaStream> {
  const devices = globalThis.navigator?.mediaDevices;
  if (!devices?.getUserMedia) {
    throw new RejoinderError("microphone_unavailable", `the microphone is unavailable${secureHint()}`);
  }
  try {
    return await devices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
  } catch (error) {
    const name = error instanceof Error ? error.name : "";
    const detail = error instanceof Error ? error.message : String(error);
    const said = MICROPHONE_ERRORS[name] ?? "the microphone could not be opened";
    throw new RejoinderError("microphone_unavailable", `${said}${detail ? ` (${detail})` : ""}`, { cause: error });
  }
}

async function running(context: AudioContext): Promise<void> {
  if (context.state === "running") return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, RESUME_TIMEOUT_MS)));
  await Promise.race([context.resume(), late]);
  clearTimeout(timer);
  if ((context.state as string) !== "running") {
    throw new RejoinderError(
      "audio_suspended",
      "the browser did not start audio: call connect() from a user gesture (a click or a key press)",
    );
  }
}

class WorkletPlayer implements Player {
  onReport: ((report: PlayerReport) => void) | null = null;

  constructor(
    private readonly node: AudioWorkletNode,
    private readonly latency: () => number,
  ) {
    node.port.onmessage = (event: MessageEvent<PlayerMessage>) => this.onReport?.(event.data);
  }

  #post(command: PlayerCommand, transfer: Transferable[] = []): void {
    this.node.port.postMessage(command, transfer);
  }

  reset(epoch: number): void {
    this.#post({ type: "reset", epoch });
  }

  configure(sampleRate: number): void {
    this.#post({ type: "config", rate: sampleRate, latency: this.latency() });
  }

  write(pcm: ArrayBuffer): void {
    this.#post({ type: "audio", pcm }, [pcm]);
  }

  clear(): void {
    this.#post({ type: "clear" });
  }

  refreshLatency(): void {
    this.#post({ type: "latency", latency: this.latency() });
  }
}

export async function openBrowserAudio(options: AudioOptions): Promise<AudioSession> {
  const Context = globalThis.AudioContext;
  if (typeof Context !== "function") {
    throw new RejoinderError("audio_unavailable", "this browser has no Web Audio (AudioContext)");
  }
  const owned = options.audioContext === undefined;
  const context = options.audioContext ?? new Context({ latencyHint: "interactive" });
  const cleanups: Array<() => void> = [];
  let microphone: MediaStream | null = null;
  let ownMicrophone = false;
  const close = async (): Promise<void> => {
    for (const cleanup of cleanups.splice(0).reverse()) {
      try {
        cleanup();
      } catch {
        // a node already disconnected: nothing left to undo
      }
    }
    if (ownMicrophone) for (const track of microphone?.getTracks() ?? []) track.stop();
    if (owned && context.state !== "closed") await context.close().catch(() => {});
  };
  try {
    const websocket = options.transport === "websocket";
    const resumed = running(context);
    resumed.catch(() => {}); // awaited below; not "unhandled" if the worklet fails first
    let clockFallback = false;
    try {
      await loadWorklet(context, options.workletUrl);
    } catch (error) {
      // The WebRTC path only needs the worklet for its clock: page timers will do.
      if (websocket) throw error;
      clockFallback = true;
    }
    await resumed;
    if (options.microphone === true) {
      microphone = await openMicrophone();
      ownMicrophone = true;
    } else if (options.microphone !== false) microphone = options.microphone;
    const latency = (): number => (context.baseLatency || 0) + (context.outputLatency || 0);
    let player: WorkletPlayer | null = null;
    if (websocket) {
      const node = new AudioWorkletNode(context, "rejoinder-player", { outputChannelCount: [1] });
      node.connect(context.destination);
      cleanups.push(() => node.disconnect());
      player = new WorkletPlayer(node, latency);
      const refresh = setInterval(() => player?.refreshLatency(), LATENCY_REFRESH_MS);
      cleanups.push(() => clearInterval(refresh));
    }
    const session: AudioSession = {
      microphone,
      context,
      player,
      startCapture(sampleRate, onFrame) {
        if (microphone === null) return;
        const source = context.createMediaStreamSource(microphone);
        const node = new AudioWorkletNode(context, "rejoinder-capture", { processorOptions: { sampleRate } });
        node.port.onmessage = (event: MessageEvent<ArrayBuffer>) => onFrame(event.data);
        source.connect(node);
        cleanups.push(() => {
          node.port.onmessage = null;
          source.disconnect();
          node.disconnect();
        });
      },
      every(ms, tick) {
        if (clockFallback) {
          const timer = setInterval(tick, ms);
          return () => clearInterval(timer);
        }
        const node = new AudioWorkletNode(context, "rejoinder-clock", { processorOptions: { seconds: ms / 1000 } });
        const sink = context.createGain();
        sink.gain.value = 0;
        node.connect(sink).connect(context.destination); // a node that renders nowhere is not run
        node.port.onmessage = () => tick();
        let stopped = false;
        const stop = (): void => {
          if (stopped) return;
          stopped = true;
          node.port.onmessage = null;
          node.disconnect();
          sink.disconnect();
        };
        cleanups.push(stop);
        return stop;
      },
      outputLatency: () => context.outputLatency || 0,
      close,
    };
    return session;
  } catch (error) {
    await close();
    throw error;
  }
}
