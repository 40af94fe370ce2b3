// AudioWorklet processors for the WebSocket path of the rejoinder page (protocol v1).
//
// rejoinder-capture: microphone -> PCM16LE mono at the rate announced in "start"
//   (low-pass FIR, then linear interpolation), posted to the page in 20 ms frames.
// rejoinder-player: agent PCM16LE mono at the server's rate -> the speakers, and the
//   playback truth: how many of the server's samples have been played.
//
// What "played" means here: a sample counts once the audio graph has rendered it and the
// output latency the page passes in (AudioContext.baseLatency + outputLatency) has gone
// by, so the count follows what reaches the speaker, not what was received. Reports go
// out every 50 ms while the count moves and once more when it stops. On "clear" queued
// audio is dropped and the count where playback stopped is reported at once (what was
// already rendered is still heard), marked cleared.

const REPORT_SECONDS = 0.05;
const PREBUFFER_SECONDS = 0.04;

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.outRate = options.processorOptions.sampleRate;
    this.step = sampleRate / this.outRate; // input samples per output sample
    this.frame = new Int16Array(Math.round(this.outRate / 50));
    this.filled = 0;
    this.t = 0; // position of the next output sample between prev (0) and the current (1)
    this.prev = 0;
    this.taps = this.step > 1 ? lowPass(0.45 / this.step, 33) : null;
    this.history = new Float32Array(this.taps ? this.taps.length : 1);
    this.at = 0;
  }

  filter(x) {
    const taps = this.taps;
    if (taps === null) return x;
    const h = this.history;
    const n = h.length;
    h[this.at] = x;
    let y = 0;
    let j = this.at;
    for (let k = 0; k < n; k++) {
      y += taps[k] * h[j];
      j = j === 0 ? n - 1 : j - 1;
    }
    this.at = this.at + 1 === n ? 0 : this.at + 1;
    return y;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    for (let i = 0; i < channel.length; i++) {
      const y = this.filter(channel[i]);
      while (this.t <= 1) {
        const v = this.prev + (y - this.prev) * this.t;
        this.frame[this.filled++] = Math.max(-32768, Math.min(32767, Math.round(v * 32767)));
        if (this.filled === this.frame.length) {
          const out = this.frame;
          this.frame = new Int16Array(out.length); // before the transfer empties `out`
          this.port.postMessage(out.buffer, [out.buffer]);
          this.filled = 0;
        }
        this.t += this.step;
      }
      this.t -= 1;
      this.prev = y;
    }
    return true;
  }
}

// A windowed-sinc low-pass (Blackman window); cutoff in cycles per input sample.
function lowPass(cutoff, n) {
  const taps = new Float32Array(n);
  const mid = (n - 1) / 2;
  let sum = 0;
  for (let k = 0; k < n; k++) {
    const x = k - mid;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const w =
      0.42 - 0.5 * Math.cos((2 * Math.PI * k) / (n - 1)) + 0.08 * Math.cos((4 * Math.PI * k) / (n - 1));
    taps[k] = sinc * w;
    sum += taps[k];
  }
  for (let k = 0; k < n; k++) taps[k] /= sum;
  return taps;
}

class PlayerProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.rate = sampleRate; // the server's rate, set by "config"
    this.step = 1;
    this.latencyFrames = 0;
    this.buf = new Float32Array(sampleRate * 10);
    this.r = 0; // read position (fractional, into buf)
    this.w = 0; // write position
    this.played = 0; // server samples the read head has passed
    this.heard = 0; // `played` as of latencyFrames ago: what the listener has heard
    this.reported = 0;
    this.lastReport = 0;
    this.marks = []; // [frame, played] snapshots, oldest first
    this.playing = false;
    this.waitingSince = -1;
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  onMessage(msg) {
    if (msg.type === "config") {
      this.rate = msg.rate;
      this.step = msg.rate / sampleRate;
      this.latencyFrames = Math.max(0, Math.round((msg.latency || 0) * sampleRate));
    } else if (msg.type === "latency") {
      this.latencyFrames = Math.max(0, Math.round(msg.latency * sampleRate));
    } else if (msg.type === "audio") {
      this.write(new Int16Array(msg.pcm, 0, msg.pcm.byteLength >> 1));
    } else if (msg.type === "clear") {
      this.w = Math.floor(this.r);
      this.r = this.w;
      this.playing = false;
      this.waitingSince = -1;
      this.marks.length = 0;
      this.heard = this.played;
      this.report(true);
    }
  }

  write(samples) {
    const start = Math.floor(this.r);
    if (this.w + samples.length > this.buf.length) {
      const live = this.w - start;
      const size = Math.max(this.buf.length, 2 * (live + samples.length));
      if (size === this.buf.length) this.buf.copyWithin(0, start, this.w);
      else {
        const next = new Float32Array(size);
        next.set(this.buf.subarray(start, this.w));
        this.buf = next;
      }
      this.r -= start;
      this.w = live;
    }
    for (let i = 0; i < samples.length; i++) this.buf[this.w + i] = samples[i] / 32768;
    this.w += samples.length;
  }

  report(cleared) {
    this.reported = this.heard;
    this.lastReport = currentFrame;
    const playing = this.playing || this.heard !== this.played;
    this.port.postMessage(cleared ? { played: this.heard, cleared: true } : { played: this.heard, playing });
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    const buffered = this.w - this.r;
    if (!this.playing && buffered > 0) {
      if (this.waitingSince < 0) this.waitingSince = currentFrame;
      const waited = (currentFrame - this.waitingSince) / sampleRate;
      if (buffered >= PREBUFFER_SECONDS * this.rate || waited >= PREBUFFER_SECONDS) {
        this.playing = true;
        this.waitingSince = -1;
      }
    }
    for (let i = 0; i < out.length; i++) {
      if (!this.playing) {
        out[i] = 0;
        continue;
      }
      const k = Math.floor(this.r);
      const a = this.buf[k];
      const b = k + 1 < this.w ? this.buf[k + 1] : 0;
      out[i] = a + (b - a) * (this.r - k);
      this.r += this.step;
      const passed = Math.min(Math.floor(this.r), this.w) - k;
      this.played += passed;
      if (this.r >= this.w) {
        this.r = this.w; // drained: the segment (or what was sent of it) has been played
        this.playing = false;
      }
    }
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    this.marks.push([currentFrame + out.length, this.played]);
    const due = currentFrame + out.length - this.latencyFrames;
    while (this.marks.length && this.marks[0][0] <= due) this.heard = this.marks.shift()[1];
    if (this.heard !== this.reported) {
      const settled = this.heard === this.played && !this.playing;
      if (settled || currentFrame - this.lastReport >= REPORT_SECONDS * sampleRate) this.report(false);
    }
    return true;
  }
}

// Posts a tick every `seconds` of audio time: a clock that keeps running in a background
// tab, where the page's own timers are throttled (the WebRTC path polls its stats on it).
class ClockProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.every = Math.round(options.processorOptions.seconds * sampleRate);
    this.next = currentFrame + this.every;
  }

  process() {
    if (currentFrame >= this.next) {
      this.next = currentFrame + this.every;
      this.port.postMessage(currentTime);
    }
    return true;
  }
}

registerProcessor("rejoinder-clock", ClockProcessor);
registerProcessor("rejoinder-capture", CaptureProcessor);
registerProcessor("rejoinder-player", PlayerProcessor);
