// A failed Keel call, thrown by the SWIG binding (bindings/swig/keel.i) with the message the core
// left in keel_last_error(). Checked, like IOException: a bad config or a missing checkpoint is
// something a caller can act on. status is one of Keel.KEEL_ERR_*.
package keel;

public class KeelException extends Exception {
  private final int status;

  public KeelException(String message, int status) {
    super(message);
    this.status = status;
  }

  /** The keel_status code, e.g. Keel.KEEL_ERR_INVALID_CONFIG. */
  public int getStatus() {
    return status;
  }
}
