/** Limits of protocol version 1 (docs/protocol.md, "Limits"), checked before sending. */

export const MIN_SAMPLE_RATE = 8000;
export const MAX_SAMPLE_RATE = 96000;
/** Longest typed user input, in characters (code points, as the server counts them). */
export const MAX_USER_TEXT_CHARS = 8192;
/** The microphone rate announced in `start` unless the caller picks another. */
export const DEFAULT_CAPTURE_RATE = 16000;
/** How often the WebRTC path reads the receiver's stats and reports `played` (ms). */
export const STATS_INTERVAL_MS = 40;
