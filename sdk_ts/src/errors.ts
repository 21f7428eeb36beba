// The protocol's error model: every error status carries exactly one google.rpc.ErrorInfo of the
// agentrunner.langbot.app domain (reason, retryable), plus RetryInfo when the peer says when to retry.
import { Code, ConnectError } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, durationMs } from "@bufbuild/protobuf/wkt";
import { ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

export const DOMAIN = "agentrunner.langbot.app";

/** Each reason's gRPC code, default retryability and PROTOCOL_V1 §9 spec code. */
export const REASONS = {
  UNAUTHORIZED: [Code.PermissionDenied, false, "unauthorized"],
  RUN_TOKEN_INVALID: [Code.Unauthenticated, false, "unauthorized"],
  NOT_FOUND: [Code.NotFound, false, "not_found"],
  DEADLINE_EXCEEDED: [Code.DeadlineExceeded, true, "deadline_exceeded"],
  PAYLOAD_TOO_LARGE: [Code.ResourceExhausted, false, "payload_too_large"],
  RATE_LIMITED: [Code.ResourceExhausted, true, "rate_limited"],
  INVALID_ARGUMENT: [Code.InvalidArgument, false, "invalid_argument"],
  RUNTIME_ERROR: [Code.Internal, false, "runtime_error"],
  RUNNER_UNAVAILABLE: [Code.Unavailable, true, "runtime_error"],
  BINDING_NOT_FOUND: [Code.NotFound, false, "not_found"],
  FAILED_PRECONDITION: [Code.FailedPrecondition, false, "invalid_argument"],
  NOT_IMPLEMENTED: [Code.Unimplemented, false, "unauthorized"],
  ALREADY_EXISTS: [Code.AlreadyExists, false, "invalid_argument"],
} as const satisfies Record<string, readonly [Code, boolean, string]>;

export type Reason = keyof typeof REASONS;

const FALLBACK: Partial<Record<Code, Reason>> = {
  [Code.PermissionDenied]: "UNAUTHORIZED",
  [Code.Unauthenticated]: "RUN_TOKEN_INVALID",
  [Code.NotFound]: "NOT_FOUND",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED",
  [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.FailedPrecondition]: "FAILED_PRECONDITION",
  [Code.Unimplemented]: "NOT_IMPLEMENTED",
  [Code.AlreadyExists]: "ALREADY_EXISTS",
  [Code.ResourceExhausted]: "PAYLOAD_TOO_LARGE",
};

export interface AgentRunnerErrorOptions {
  code?: Code;
  retryable?: boolean;
  /** Milliseconds the caller should wait before retrying (google.rpc.RetryInfo). */
  retryDelayMs?: number;
  metadata?: Record<string, string>;
}

/** A protocol error: host API calls throw it; runner servers throw it to answer with a rich status. */
export class AgentRunnerError extends Error {
  override name = "AgentRunnerError";
  readonly reason: string;
  readonly code: Code;
  readonly retryable: boolean;
  readonly retryDelayMs?: number;
  readonly metadata: Record<string, string>;

  constructor(reason: string, message: string, options: AgentRunnerErrorOptions = {}) {
    super(message);
    const spec = REASONS[reason as Reason] ?? REASONS.RUNTIME_ERROR;
    this.reason = reason;
    this.code = options.code ?? spec[0];
    this.retryable = options.retryable ?? spec[1];
    this.retryDelayMs = options.retryDelayMs;
    this.metadata = options.metadata ?? {};
  }

  /** The PROTOCOL_V1 §9 code (`unauthorized`, `not_found`, ...) for run.failed and tool results. */
  get specCode(): string {
    return (REASONS[this.reason as Reason] ?? REASONS.RUNTIME_ERROR)[2];
  }

  /** The ConnectError a handler throws: the status with exactly one ErrorInfo (and RetryInfo). */
  toConnectError(): ConnectError {
    const details = [
      {
        desc: ErrorInfoSchema,
        value: { reason: this.reason, domain: DOMAIN, metadata: { ...this.metadata, retryable: String(this.retryable) } },
      },
    ] as ConstructorParameters<typeof ConnectError>[3];
    if (this.retryDelayMs !== undefined) {
      details!.push({ desc: RetryInfoSchema, value: { retryDelay: durationFromMs(this.retryDelayMs) } });
    }
    return new ConnectError(this.message, this.code, undefined, details);
  }

  /** Any error of a call as an AgentRunnerError (ErrorInfo and RetryInfo read from the status). */
  static from(err: unknown): AgentRunnerError {
    if (err instanceof AgentRunnerError) return err;
    const ce = ConnectError.from(err);
    const retry = ce.findDetails(RetryInfoSchema)[0];
    const retryDelayMs = retry?.retryDelay ? durationMs(retry.retryDelay) : undefined;
    const info = ce.findDetails(ErrorInfoSchema).find((i) => i.domain === DOMAIN);
    if (info) {
      const { retryable, ...metadata } = info.metadata;
      return new AgentRunnerError(info.reason, ce.rawMessage, {
        code: ce.code, retryable: retryable === "true", retryDelayMs, metadata,
      });
    }
    const reason = ce.code === Code.Unavailable ? "RUNTIME_ERROR" : FALLBACK[ce.code] ?? "RUNTIME_ERROR";
    const retryable = [Code.Unavailable, Code.DeadlineExceeded, Code.Aborted].includes(ce.code);
    return new AgentRunnerError(reason, ce.rawMessage, { code: ce.code, retryable, retryDelayMs });
  }
}

