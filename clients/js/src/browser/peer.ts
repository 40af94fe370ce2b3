/**
 * A browser `RTCPeerConnection` as the client's `PeerSession`: the microphone's track
 * (or a receive-only audio section when there is none), the camera's video tracks if given,
 * a data channel named "rejoinder" (ordered, as the page's), the agent's track played by an
 * audio element, and its inbound-rtp stats.
 */

import { RejoinderError } from "../errors.js";
import type { InboundAudioStats, PeerOptions, PeerSession, SessionDescription } from "../platform.js";

const GATHER_TIMEOUT_MS = 3000;

export function createBrowserPeer(options: PeerOptions): PeerSession {
  const Peer = globalThis.RTCPeerConnection;
  if (typeof Peer !== "function") {
    throw new RejoinderError("webrtc_unavailable", "this browser has no WebRTC (RTCPeerConnection)");
  }
  const configuration: RTCConfiguration = { iceServers: [...options.iceServers] };
  if (options.iceTransportPolicy !== undefined) configuration.iceTransportPolicy = options.iceTransportPolicy;
  const pc = new Peer(configuration);
  const channel = pc.createDataChannel("rejoinder", { ordered: true });
  const tracks = options.microphone?.getAudioTracks() ?? [];
  for (const track of tracks) pc.addTrack(track, options.microphone!);
  if (tracks.length === 0) pc.addTransceiver("audio", { direction: "recvonly" });
  for (const track of options.camera?.getVideoTracks() ?? []) pc.addTrack(track, options.camera!);
  const ownElement = options.audioElement === undefined && typeof Audio === "function";
  const element = options.audioElement ?? (ownElement ? new Audio() : null);
  if (element !== null) element.autoplay = true;
  let receiver: RTCRtpReceiver | null = null;
  let playing: MediaStream | null = null; // what this connection put on the element
  let quiet = false;
  pc.ontrack = (event) => {
    if (quiet || event.track.kind !== "audio") return;
    receiver = event.receiver;
    if (element !== null) {
      playing = event.streams[0] ?? new MediaStream([event.track]);
      element.srcObject = playing;
      element.play().catch(() => {}); // autoplay refused: the stats say nothing was heard
    }
  };
  /** Stops this connection's audio on the element, and only its own: the page's element
   * may already play the connection that replaced this one. */
  function stopPlaying(): void {
    if (element !== null && playing !== null && element.srcObject === playing) {
      element.pause();
      element.srcObject = null;
    }
    playing = null;
  }

  const session: PeerSession = {
    onOpen: null,
    onMessage: null,
    onChannelClose: null,
    onState: null,
    get channelOpen() {
      return channel.readyState === "open";
    },
    async offer(): Promise<SessionDescription> {
      await pc.setLocalDescription(await pc.createOffer());
      await new Promise<void>((resolve) => {
        if (pc.iceGatheringState === "complete") return resolve();
        const timer = setTimeout(done, GATHER_TIMEOUT_MS);
        function done(): void {
          clearTimeout(timer);
          pc.removeEventListener("icegatheringstatechange", check);
          resolve();
        }
        function check(): void {
          if (pc.iceGatheringState === "complete") done();
        }
        pc.addEventListener("icegatheringstatechange", check);
      });
      const local = pc.localDescription!;
      return { type: local.type, sdp: local.sdp };
    },
    async accept(answer: SessionDescription): Promise<void> {
      await pc.setRemoteDescription({ type: answer.type as RTCSdpType, sdp: answer.sdp });
    },
    send(text: string): void {
      if (channel.readyState === "open") channel.send(text);
    },
    async inboundAudio(): Promise<InboundAudioStats | null> {
      if (receiver === null) return null;
      const report = await receiver.getStats();
      let inbound: (InboundAudioStats & { codecId?: string }) | null = null;
      report.forEach((entry: { type?: string; kind?: string }) => {
        if (entry.type === "inbound-rtp" && entry.kind === "audio") inbound = entry as InboundAudioStats;
      });
      if (inbound === null) return null;
      const found: InboundAudioStats & { codecId?: string } = inbound;
      const codec = found.codecId ? (report.get(found.codecId) as { clockRate?: number } | undefined) : undefined;
      return codec?.clockRate ? { ...found, clockRate: codec.clockRate } : found;
    },
    quiet(): void {
      if (quiet) return;
      quiet = true;
      stopPlaying();
      // Off this connection only: the tracks are the client's, and the next connection
      // sends them. The server hears no more microphone here (its media timeout then takes
      // the connection for dropped, which keeps the session), nor anything else of it.
      for (const sender of pc.getSenders()) {
        if (sender.track !== null) sender.replaceTrack(null).catch(() => {});
      }
    },
    close(): void {
      quiet = true;
      channel.onopen = channel.onmessage = channel.onclose = null;
      pc.onconnectionstatechange = null;
      pc.ontrack = null;
      channel.close();
      pc.close();
      stopPlaying();
    },
  };
  channel.onopen = () => session.onOpen?.();
  channel.onmessage = (event: MessageEvent<unknown>) => {
    if (typeof event.data === "string") session.onMessage?.(event.data);
  };
  channel.onclose = () => session.onChannelClose?.();
  pc.onconnectionstatechange = () => session.onState?.(pc.connectionState);
  return session;
}
