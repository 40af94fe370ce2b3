/**
 * What the client knows of the conversation: the agent's and the user's states and the
 * transcript, updated from server messages (no I/O).
 *
 * A transcript message carries the whole text of its turn so far, never a delta: the
 * open (interim) turn of its role is replaced, and a `final` one closes it. A turn still
 * open when its session ends (the connection closed, or a resume failed and a new session
 * began) never gets its final message: it is closed here, marked `lost`.
 */

import type { AgentStateName, TranscriptMessage, UserStateName } from "./protocol.js";

export type Role = "user" | "agent";

export interface Transcript {
  /** Stable for the turn: interim updates and the final message share it. */
  readonly id: number;
  readonly role: Role;
  readonly text: string;
  readonly final: boolean;
  /** A final agent turn that was cut short (the text is what was heard). */
  readonly interrupted: boolean;
  /** Closed by the client because its session ended before its final message came. */
  readonly lost: boolean;
}

export interface StateChange<S> {
  readonly state: S;
  /** The state before (`null` at the start of a session). */
  readonly previous: S | null;
}

export class Conversation {
  agentState: AgentStateName | null = null;
  userState: UserStateName | null = null;
  readonly #turns: Transcript[] = [];
  readonly #open: Record<Role, number | null> = { user: null, agent: null };

  get transcripts(): readonly Transcript[] {
    return this.#turns;
  }

  /** The change, or `null` when the state is the one already known (a snapshot after a resume). */
  agent(state: AgentStateName): StateChange<AgentStateName> | null {
    const previous = this.agentState;
    if (previous === state) return null;
    this.agentState = state;
    return { state, previous };
  }

  user(state: UserStateName): StateChange<UserStateName> | null {
    const previous = this.userState;
    if (previous === state) return null;
    this.userState = state;
    return { state, previous };
  }

  /** Applies one transcript message; returns the turn as it now stands. */
  transcript(message: TranscriptMessage): Transcript {
    const index = this.#open[message.role];
    const turn: Transcript = {
      id: index ?? this.#turns.length,
      role: message.role,
      text: message.text,
      final: message.final,
      interrupted: message.final && message.interrupted === true,
      lost: false,
    };
    if (index === null) this.#turns.push(turn);
    else this.#turns[index] = turn;
    this.#open[message.role] = message.final ? null : turn.id;
    return turn;
  }

  /** The session ended: open turns are closed as lost, states become unknown. Returns the
   * turns it closed. */
  endSession(): Transcript[] {
    const closed: Transcript[] = [];
    for (const role of ["user", "agent"] as const) {
      const index = this.#open[role];
      if (index === null) continue;
      const turn = this.#turns[index]!;
      this.#turns[index] = { ...turn, final: true, lost: true };
      closed.push(this.#turns[index]);
      this.#open[role] = null;
    }
    this.agentState = null;
    this.userState = null;
    return closed;
  }
}
