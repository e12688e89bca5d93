/** The final status of one stream, as the result document writes it (shared.status.Status). */
export type Status = "complete" | "incomplete" | "cancelled" | "error" | "invalid" | "refused";

export const STATUSES: readonly Status[] = [
  "complete",
  "incomplete",
  "cancelled",
  "error",
  "invalid",
  "refused",
];
