// The metrics card's words: each metric the session sends (docs/protocol.md, "Metrics";
// rejoinder.models.metrics) in plain words, with the field's own name kept for hover.
// Delays are shown in seconds, probabilities as percentages, counts as they are: a value
// is never shown as a time unless its field is one.

const KINDS = {
  llm: "Language model",
  tts: "Speech synthesis",
  stt: "Speech recognition",
  eou: "End of your turn",
  realtime: "Realtime model",
  voice_latency: "Your wait",
};

// field -> plain words; "kind.field" overrides it for one kind
const FIELDS = {
  ttft: "first text after",
  "realtime.ttft": "first audio after",
  ttfb: "first audio after",
  duration: "took",
  prompt_tokens: "tokens read",
  completion_tokens: "tokens written",
  cached_tokens: "tokens from cache",
  retries: "retries",
  characters: "characters",
  audio_duration: "audio",
  "tts.audio_duration": "audio made",
  "stt.audio_duration": "audio heard",
  latency: "took",
  "stt.latency": "text ready after",
  "voice_latency.latency": "you waited",
  end_of_utterance_delay: "turn ended after",
  transcription_delay: "text ready after",
  end_of_turn_probability: "sure you were done",
  input_tokens: "tokens in",
  output_tokens: "tokens out",
};

// Instants on the server's loop clock and identifiers say nothing to a person.
const hidden = (key) => key === "type" || key === "timestamp" || key.endsWith("_at") || key.endsWith("_id");
const isProbability = (key) => key.includes("probability") || key.endsWith("_prob");
const isSeconds = (key) => /duration|delay|latency|^ttf/.test(key);

function seconds(value) {
  return (value < 10 ? value.toFixed(2) : value.toFixed(1)) + " s";
}

function plainNumber(value) {
  return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(3)));
}

/** The text of one field, or null when it is not shown. */
export function fieldText(key, value) {
  if (hidden(key) || typeof value !== "number" || !Number.isFinite(value)) return null;
  if (isProbability(key)) {
    return value >= 0 && value <= 1 ? Math.round(value * 100) + " %" : plainNumber(value);
  }
  if (isSeconds(key)) return seconds(value);
  return plainNumber(value);
}

/**
 * One metric as `{ kind, name, term, parts: [{ label, term, text }] }`: `name` in plain
 * words, `term` the technical name (for a title), `parts` the fields shown.
 */
export function describe(metrics) {
  const kind = String(metrics.type || "metrics");
  const model = typeof metrics.model === "string" ? metrics.model : "";
  const parts = [];
  for (const [key, value] of Object.entries(metrics)) {
    const text = fieldText(key, value);
    if (text === null) continue;
    const label = FIELDS[kind + "." + key] || FIELDS[key] || key.replaceAll("_", " ");
    parts.push({ label, term: key, text });
  }
  return {
    kind,
    name: KINDS[kind] || kind.replaceAll("_", " "),
    term: kind + " metrics" + (model ? " · " + model : ""),
    parts,
  };
}
